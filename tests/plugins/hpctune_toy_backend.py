"""A third-party backend for hpctune, as another package would ship it (tests only).

A tiny batch system: :meth:`ToyBackend.submit_controller` starts the study's controller as a
detached process (its "job", with a job id) that runs ``hpctune controller DIR --backend toy``;
the controller starts each worker as a detached process too, recorded in a spool folder of the
study (``toy/``), and asks the spool whether a worker still runs. It registers through the
entry point group ``hpctune.backends`` and touches nothing inside ``hpctune/``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hpctune.backends import Backend, Executor, WorkerState
from hpctune.controller.launch import prepare_study_dir, run_local
from hpctune.spec import StudySpec
from hpctune.study.states import StudyState
from hpctune.wire.layout import StudyPaths


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _spawn(command: list[str], log: Path, cwd: Path) -> int:
    """Start ``command`` detached (its own session), output to ``log``; return its pid."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        child = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=cwd,
        )
    return child.pid


class ToyExecutor(Executor):
    """Workers as detached processes, each a "job" in the study's spool folder."""

    name = "toy"

    def __init__(self, paths: StudyPaths) -> None:
        self.paths = paths
        self.spool = paths.root / "toy" / "jobs"
        self.spool.mkdir(parents=True, exist_ok=True)

    def start(
        self, worker_ids: list[str], devices: int | None = None
    ) -> dict[str, dict[str, Any]]:
        infos = {}
        for worker_id in worker_ids:
            pid = _spawn(
                [sys.executable, "-m", "hpctune.worker.loop", str(self.paths.root), worker_id],
                self.spool / f"{worker_id}.out",
                self.paths.root,
            )
            (self.spool / f"{worker_id}.json").write_text(json.dumps({"pid": pid}))
            infos[worker_id] = {"executor": self.name, "job": f"toy-{pid}", "pid": pid}
        return infos

    def state(self, worker_id: str, info: Mapping[str, Any]) -> WorkerState:
        pid = info.get("pid")
        return WorkerState.RUNNING if pid and _alive(int(pid)) else WorkerState.GONE

    def cancel(self, worker_id: str, info: Mapping[str, Any]) -> None:
        pid = info.get("pid")
        if pid and _alive(int(pid)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(pid), signal.SIGKILL)

    def output_path(self, worker_id: str, info: Mapping[str, Any]) -> Path | None:
        return self.spool / f"{worker_id}.out"


class ToyBackend(Backend):
    """The controller as a detached "job", workers as detached processes."""

    name = "toy"
    section = "toy"
    runs_controller_here = False

    def parse_options(self, table: Mapping[str, Any], source: Path) -> dict[str, Any]:
        from hpctune.errors import StudySpecError

        unknown = set(table) - {"label"}
        if unknown:
            raise StudySpecError(source, f"toy.{sorted(unknown)[0]}", "unknown key of [toy]")
        return {"label": str(table.get("label", ""))}

    def executor(self, paths: StudyPaths, spec: StudySpec) -> Executor:
        return ToyExecutor(paths)

    def submit_controller(self, paths: StudyPaths, spec: StudySpec) -> str:
        pid = _spawn(
            [
                sys.executable,
                "-m",
                "hpctune.cli",
                "controller",
                str(paths.root),
                "--backend",
                "toy",
            ],
            paths.root / "toy" / "controller.out",
            paths.root,
        )
        (paths.root / "toy" / "controller.json").write_text(json.dumps({"pid": pid}))
        return f"toy-{pid}"

    def controller_queued(self, paths: StudyPaths) -> str | None:
        try:
            pid = json.loads((paths.root / "toy" / "controller.json").read_text())["pid"]
        except (OSError, ValueError, KeyError):
            return None
        return f"toy-{pid}" if _alive(int(pid)) else None

    def run_controller(self, paths: StudyPaths) -> StudyState:
        prepare_study_dir(paths)
        return run_local(paths, backend=self, poll_interval=0.1)

    def status(
        self, paths: StudyPaths, record: Any, controller_alive: bool
    ) -> dict[str, Any] | None:
        if not (paths.root / "toy").is_dir():
            return None
        return {
            "controller_job": self.controller_queued(paths),
            "jobs": len(list((paths.root / "toy" / "jobs").glob("*.json"))),
        }

    def status_lines(self, status: Mapping[str, Any], root: str) -> list[str]:
        return [f"toy: {status['jobs']} worker job(s) submitted"]
