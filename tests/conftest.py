"""Shared helpers: write a study (spec + training script) into a temporary folder and run it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from hpctune.study.formatting import toml_value
from hpctune.wire.protocol import Heartbeat

# The suite must pass on a loaded 2-core machine: property tests are judged on what they
# find, never on how fast examples are drawn or run (a test's own @settings still apply).
settings.register_profile("loaded", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("loaded")

REPO = Path(__file__).resolve().parent.parent
WORKLOADS = Path(__file__).resolve().parent / "workloads"
DIGITS = REPO / "jobs" / "digits"


def write_study(
    folder: Path,
    *,
    train: str | Path,
    space: dict[str, Any],
    function: str = "train",
    policy: dict[str, Any] | None = None,
    generator: dict[str, Any] | None = None,
    resources: dict[str, Any] | None = None,
    slurm: dict[str, Any] | None = None,
    **study: Any,
) -> Path:
    """Write ``study.toml`` (and the training script) into ``folder``; return the spec's path.

    ``train`` is either source text (written to train.py) or a path of a script to copy.
    """
    folder.mkdir(parents=True, exist_ok=True)
    if isinstance(train, Path):
        shutil.copy(train, folder / "train.py")
    else:
        (folder / "train.py").write_text(textwrap.dedent(train))
    fields: dict[str, Any] = {
        "name": "test",
        "directory": "study",
        "entry_point": f"train.py:{function}",
        "metric": "score",
        "mode": "max",
        "max_steps": 5,
        "num_trials": 4,
        "seed": 0,
    }
    fields.update(study)
    lines = ["[study]"] + [f"{k} = {toml_value(v)}" for k, v in fields.items()]
    lines += ["", "[search_space]"] + [f"{k} = {toml_value(v)}" for k, v in space.items()]
    for name, table in (
        ("policy", policy),
        ("generator", generator),
        ("resources", resources or {"slots": 2}),
        ("slurm", slurm),
    ):
        if table:
            lines += ["", f"[{name}]"] + [f"{k} = {toml_value(v)}" for k, v in table.items()]
    path = folder / "study.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def hpctune_env() -> dict[str, str]:
    env = dict(os.environ)
    env["HPCTUNE_CONTROLLER_TIMEOUT"] = "20"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_hpctune(
    *args: str, timeout: float = 240, cwd: Path | None = None, check: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run the ``hpctune`` CLI in a subprocess and return its result."""
    result = subprocess.run(
        [sys.executable, "-m", "hpctune.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=hpctune_env(),
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"hpctune {' '.join(args)} exited {result.returncode}:\n"
            f"{result.stdout}\n{result.stderr}"
        )
    return result


def start_hpctune(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """Start the ``hpctune`` CLI in the background (its own session); ``env``: extra
    variables."""
    return subprocess.Popen(
        [sys.executable, "-m", "hpctune.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=cwd,
        env={**hpctune_env(), **(env or {})},
        start_new_session=True,
    )


def launch_local(spec: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `hpctune launch SPEC --local` to its end, then kill workers left behind (a study
    directory named ``study`` next to the spec, as :func:`write_study` makes)."""
    try:
        return run_hpctune("launch", str(spec), "--local", *args)
    finally:
        kill_workers(spec.parent / "study")


def count_reports(study_dir: Path) -> int:
    """Report lines the workers of a study wrote so far (ingested or not)."""
    events = study_dir / "events"
    files = events.glob("*.jsonl") if events.exists() else []
    return sum(p.read_bytes().count(b'"report"') for p in files)


def _running_heartbeats(study_dir: Path) -> list[Heartbeat]:
    """The heartbeats of a study's workers that say they run a segment."""
    beats = (Heartbeat.read(p) for p in study_dir.glob("workers/*/heartbeat.json"))
    return [b for b in beats if b is not None and b.state == "running"]


def kill_workers(study_dir: Path) -> None:
    """SIGKILL every worker process of a study still alive: those the journal knows and those
    whose heartbeat says they run (started by a controller that had not committed them yet)."""
    from hpctune.api import open_study

    pids = {b.pid for b in _running_heartbeats(study_dir)}
    if (study_dir / "journal.zarr").exists():
        workers = open_study(study_dir).record.workers.values()
        pids |= {int(w.info["pid"]) for w in workers if w.info.get("pid")}
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


@pytest.fixture
def cleanup_studies() -> Iterator[list[Path]]:
    """Collect study directories; kill their leftover workers after the test."""
    studies: list[Path] = []
    yield studies
    for study in studies:
        kill_workers(study)


def report_lines(study_dir: Path) -> int:
    """Report lines the workers of a study have written so far."""
    events = study_dir / "events"
    if not events.exists():
        return 0
    return sum(p.read_bytes().count(b'"report"') for p in events.glob("*.jsonl"))


def kill_and_resume(
    process: subprocess.Popen[str],
    study_dir: Path,
    rng: Any,
    *,
    rounds: int,
    reports: tuple[int, int],
    pause: float = 0.3,
) -> tuple[subprocess.Popen[str], int]:
    """SIGKILL the controller ``process`` after a random number of new report lines (in
    ``reports``), up to ``rounds`` times, its workers too every second time, and `hpctune
    resume` it each time; return the last process and the number of kills."""
    kills = 0
    for round_ in range(rounds):
        # kill after a random amount of progress (report lines), so that kills land mid-training
        target = report_lines(study_dir) + rng.randint(*reports)
        while process.poll() is None and report_lines(study_dir) < target:
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, pause))
        if process.poll() is not None:
            break
        os.kill(process.pid, signal.SIGKILL)  # the controller only; its workers keep running
        process.wait()
        kills += 1
        if round_ % 2 == 1:  # and now and then the workers too (a node failure), mid-segment
            wait_for(lambda: bool(_running_heartbeats(study_dir)), 30, interval=0.02)
            kill_workers(study_dir)
        process = start_hpctune("resume", str(study_dir), "--local")
    return process, kills


def wait_for(predicate: Any, timeout: float, interval: float = 0.1) -> bool:
    """Poll ``predicate`` until true or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
