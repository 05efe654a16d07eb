"""The local executor: workers as processes on this machine (laptop, CI box, one node).

Each worker runs ``python -m hpctune.worker.loop <study-dir> <worker-id>`` — the same worker code
as on
Slurm — in its own session, so that a Ctrl-C in the terminal reaches only the controller (which
stops the study cleanly) and a killed controller leaves its workers running, to be adopted by
the next one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hpctune.backends.base import Backend, Executor, WorkerState
from hpctune.errors import SubmissionError
from hpctune.spec import StudySpec
from hpctune.wire.layout import StudyPaths
from hpctune.worker.context import DEVICES_VARIABLE

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


class LocalExecutor(Executor):
    """Start workers as local processes.

    Args:
        study_dir: The study directory.
        cpus_per_worker: Threads each worker may use (sets ``OMP_NUM_THREADS`` and friends).
        devices: What the training function sees as ``ctx.devices`` (``HPCTUNE_DEVICES``);
            default ``cpus_per_worker`` (CPUs stand in for GPUs).
        env: Extra environment variables for the workers.
    """

    name = "local"

    def __init__(
        self,
        study_dir: Path,
        *,
        cpus_per_worker: int = 1,
        devices: int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.paths = StudyPaths.of(study_dir)
        self.cpus_per_worker = cpus_per_worker
        self.devices = cpus_per_worker if devices is None else devices
        self.env = dict(env or {})
        self.host = socket.gethostname()
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    def start(
        self, worker_ids: list[str], devices: int | None = None
    ) -> dict[str, dict[str, Any]]:
        """Start one process per worker id; a worker of ``devices`` devices gets ``devices``
        times the threads of one (CPUs stand in for GPUs)."""
        scale = 1 if devices is None else devices
        env = dict(os.environ)
        for name in THREAD_VARIABLES:
            env[name] = str(self.cpus_per_worker * scale)
        env[DEVICES_VARIABLE] = str(self.devices if devices is None else devices)
        env.update(self.env)
        infos: dict[str, dict[str, Any]] = {}
        for worker_id in worker_ids:
            log = self.paths.worker_log(worker_id)
            log.parent.mkdir(parents=True, exist_ok=True)
            try:
                with open(log.with_suffix(".stdio"), "ab") as out:
                    child = subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "hpctune.worker.loop",
                            str(self.paths.root),
                            worker_id,
                        ],
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        env=env,
                        start_new_session=True,
                        cwd=self.paths.root,
                    )
            except OSError as exc:
                raise SubmissionError(f"could not start worker {worker_id}: {exc}") from exc
            self._children[worker_id] = child
            infos[worker_id] = {"executor": self.name, "pid": child.pid, "host": self.host}
        return infos

    def state(self, worker_id: str, info: Mapping[str, Any]) -> WorkerState:
        """Ask the child handle, or ``/proc`` for a worker started by an earlier controller."""
        child = self._children.get(worker_id)
        if child is not None:
            alive = child.poll() is None
        elif info.get("host") != self.host or "pid" not in info:
            return WorkerState.UNKNOWN
        else:
            alive = _is_worker_process(int(info["pid"]), worker_id)
        return WorkerState.RUNNING if alive else WorkerState.GONE

    def end_reason(self, worker_id: str, info: Mapping[str, Any]) -> str:
        """The exit code or signal of a worker this executor started ("" for adopted ones)."""
        child = self._children.get(worker_id)
        code = None if child is None else child.poll()
        if code is None:
            return ""
        if code >= 0:
            return f"its process exited with code {code}"
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        text = f"its process was killed by {name} (signal {-code})"
        if -code == signal.SIGKILL and _oom_killed(child.pid):  # type: ignore[union-attr]
            text += ": out of memory (the kernel's OOM killer)"
        return text

    def cancel(self, worker_id: str, info: Mapping[str, Any]) -> None:
        """Kill the worker's process group."""
        child = self._children.get(worker_id)
        pid = child.pid if child is not None else info.get("pid")
        if pid is None or info.get("host", self.host) != self.host:
            return
        if child is None and not _is_worker_process(int(pid), worker_id):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(int(pid), signal.SIGKILL)
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=5)

    def output_path(self, worker_id: str, info: Mapping[str, Any]) -> Path | None:
        """The worker process's stdout and stderr (``logs/workers/<W>.stdio``)."""
        return self.paths.worker_log(worker_id).with_suffix(".stdio")

    def close(self) -> None:
        """Reap finished children."""
        for child in self._children.values():
            child.poll()


def _oom_killed(pid: int) -> bool:
    """True if the kernel log says its OOM killer killed ``pid`` (needs read access to
    ``/dev/kmsg``, as root; False when it cannot be read)."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False
    needle = f"Killed process {pid} ".encode()
    try:
        while True:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                return False
            except OSError:  # EPIPE: records overwritten while reading; go on
                continue
            if not record:
                return False
            if needle in record:  # "Out of memory: Killed process 1234 (python)"
                return True
    finally:
        os.close(fd)


def _is_worker_process(pid: int, worker_id: str) -> bool:
    """True if ``pid`` is alive and is the hpctune worker ``worker_id`` (not a reused pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError):
        return False
    return state != "Z" and b"hpctune.worker.loop" in cmdline and worker_id.encode() in cmdline


def local_executor(paths: StudyPaths, spec: StudySpec) -> LocalExecutor:
    """The local executor for a study's resources (``ctx.devices``: the workers' GPUs if the
    spec gives them any, else their CPUs)."""
    resources = spec.resources
    return LocalExecutor(
        paths.root,
        cpus_per_worker=resources.cpus_per_worker,
        devices=resources.gpus_per_worker or resources.cpus_per_worker,
    )


class LocalBackend(Backend):
    """Workers as processes on this machine, the controller in the foreground (``--local``)."""

    name = "local"

    def executor(self, paths: StudyPaths, spec: StudySpec) -> Executor:
        """A :class:`LocalExecutor` for the study's ``[resources]``."""
        return local_executor(paths, spec)
