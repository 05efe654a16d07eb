"""Where Slurm jobs stand: one batched ``squeue`` call for all of them, ``sacct`` as a fallback.

Per executor instance (never shared between studies or tests): at most one ``squeue`` call per
``interval`` seconds for the user's jobs, filtered locally (``squeue -j`` fails as a whole on a
single purged job id). A job squeue no longer lists is looked up with ``sacct``; when sacct is
missing or fails, a job seen before (or submitted more than ``grace_s`` ago) counts as gone.
Failures are logged, never raised: the workers' heartbeat files are the first opinion.
"""

from __future__ import annotations

import getpass
import logging
import os
import subprocess
import time
from collections.abc import Callable

from hpctune.backends.base import WorkerState

logger = logging.getLogger(__name__)

RUNNING_STATES = {"RUNNING", "COMPLETING", "CONFIGURING", "SIGNALING", "STAGE_OUT", "RESIZING"}
PENDING_STATES = {
    "PENDING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "SUSPENDED",
    "STOPPED",
    "SPECIAL_EXIT",
    "RESV_DEL_HOLD",
    "PREEMPTED",
}
GONE_STATES = {
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
    "REVOKED",
}


def classify(slurm_state: str) -> WorkerState:
    """Map a Slurm job state (``CANCELLED by 0`` included) to a :class:`WorkerState`."""
    word = slurm_state.split()[0].rstrip("+") if slurm_state.strip() else ""
    if word in RUNNING_STATES:
        return WorkerState.RUNNING
    if word in PENDING_STATES:
        return WorkerState.PENDING
    if word in GONE_STATES:
        return WorkerState.GONE
    return WorkerState.UNKNOWN


def job_end_reason(job_id: str) -> str:
    """``"its job 12 ended OUT_OF_MEMORY: out of memory"`` and the like, from ``sacct``
    (state and ``ExitCode`` code:signal); "" when sacct is missing or knows nothing."""
    try:
        out = _run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "JobID,State,ExitCode"])
    except (OSError, subprocess.SubprocessError):
        return ""
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 3 or parts[0] != job_id:
            continue
        state, (code, _, sig) = parts[1].split()[0] if parts[1] else "", parts[2].partition(":")
        text = f"its job {job_id} ended {state}"
        if state == "OUT_OF_MEMORY":
            return f"{text}: out of memory"
        if sig.strip() not in ("", "0"):
            return f"{text}, killed by signal {sig.strip()}"
        if code.strip() not in ("", "0"):
            return f"{text} with exit code {code.strip()}"
        return text
    return ""


def job_end_time(job_id: str) -> float | None:
    """The job's end in ``sacct`` (Unix seconds, whole), ``None`` while sacct does not know it
    (the job runs, accounting lags) or when sacct is missing."""
    command = ["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "JobID,End"]
    try:
        out = subprocess.run(
            command,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
            env={**os.environ, "SLURM_TIME_FORMAT": "%s"},
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        job, _, end = line.strip().partition("|")
        if job == job_id and end.isdigit():
            return float(end)
    return None


def _run(command: list[str]) -> str:
    return subprocess.run(command, capture_output=True, text=True, check=True, timeout=60).stdout


class SlurmQueue:
    """Cached states of Slurm jobs.

    Args:
        interval: Seconds between two squeue calls.
        grace_s: A job unknown to squeue and sacct this long after its submission is gone.
        clock: A monotonic clock.
    """

    def __init__(
        self,
        interval: float = 5.0,
        grace_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = interval
        self.grace_s = grace_s
        self._clock = clock
        self._states: dict[str, str] = {}
        self._seen: set[str] = set()
        self._last = -float("inf")
        self._ok = False
        self.user = getpass.getuser()

    def refresh(self, force: bool = False) -> None:
        """Call squeue now if the cached answer is older than ``interval`` (or ``force``)."""
        now = self._clock()
        if not force and now - self._last < self.interval:
            return
        self._last = now
        try:
            out = _run(["squeue", "-h", "-r", "-u", self.user, "-o", "%i|%T"])
        except (OSError, subprocess.SubprocessError) as exc:
            logger.warning("squeue failed (%s); relying on heartbeats", exc)
            self._ok = False
            return
        self._states = {}
        for line in out.splitlines():
            job, _, state = line.strip().partition("|")
            if job:
                self._states[job] = state
        self._seen.update(self._states)
        self._ok = True

    def state(self, job_id: str, submitted: float | None = None) -> WorkerState:
        """The state of one job (``submitted``: its Unix submission time, if known)."""
        self.refresh()
        if not self._ok:
            return WorkerState.UNKNOWN
        if job_id in self._states:
            return classify(self._states[job_id])
        answer = self._sacct(job_id)
        if answer is not WorkerState.UNKNOWN:
            return answer
        recent = submitted is not None and time.time() - submitted < self.grace_s
        return WorkerState.UNKNOWN if recent and job_id not in self._seen else WorkerState.GONE

    def _sacct(self, job_id: str) -> WorkerState:
        try:
            out = _run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "JobID,State"])
        except (OSError, subprocess.SubprocessError) as exc:
            logger.info("sacct failed for %s (%s)", job_id, exc)
            return WorkerState.UNKNOWN
        for line in out.splitlines():
            job, _, state = line.strip().partition("|")
            if job == job_id:
                return classify(state)
        return WorkerState.UNKNOWN
