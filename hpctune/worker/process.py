"""This worker's process as the operating system and Slurm see it: when it started, and the
Slurm job (or array task) it runs in (for the heartbeat and the accounting)."""

from __future__ import annotations

import os

from hpctune.wire.clock import Clock, RealClock


def own_job_id() -> str | None:
    """This process's Slurm job as Slurm's commands name it: ``<array job>_<task>`` for an
    array task (submitit's ``JobEnvironment.job_id``), else ``SLURM_JOB_ID``; ``None`` outside
    Slurm."""
    if not os.environ.get("SLURM_JOB_ID"):
        return None
    from submitit.slurm.slurm import SlurmJobEnvironment

    return SlurmJobEnvironment().job_id


def process_start_time(clock: Clock | None = None) -> float:
    """When this worker's run started (``clock``'s time, the wall clock by default).

    For a worker that is a Slurm job step's task (its parent is a ``slurmstepd``, as ``srun``
    starts hpctune's Slurm workers) that is the start of the job's batch step (its
    ``slurmstepd``, found in Linux's ``/proc``), so that the run counts Slurm's launch of the
    step the worker runs in, as sacct does. Elsewhere (a local worker, even inside a Slurm
    allocation), or where ``/proc`` hides that process, the start of this process if within the
    last minute (a worker process starts its :class:`Worker` at once); else now."""
    now = (clock or RealClock()).now()
    job = os.environ.get("SLURM_JOB_ID")
    age = _batch_step_age(job) if job and _parent_is_slurmstepd() else None
    if age is None:
        age = _process_age("self")
        if age is None or age > 60.0:
            return now
    return now - age


def _stat_fields(pid: str) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name (state, parent pid, ...).

    Raises:
        OSError, IndexError: No such process, or an unreadable line.
    """
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def _is_slurmstepd(pid: str) -> bool:
    """Whether process ``pid`` is Slurm's step daemon (by its executable's name)."""
    with open(f"/proc/{pid}/comm", "rb") as f:
        return f.read().strip() == b"slurmstepd"


def _process_age(pid: str) -> float | None:
    """Seconds since process ``pid`` started (from ``/proc``), or ``None`` if unknown."""
    try:
        ticks = int(_stat_fields(pid)[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    age = uptime - ticks / os.sysconf("SC_CLK_TCK")
    return age if age >= 0.0 else None


def _parent_is_slurmstepd() -> bool:
    """Whether this process was started by Slurm's step daemon (it is a step's task)."""
    try:
        return _is_slurmstepd(_stat_fields("self")[1])
    except (OSError, IndexError):
        return False


def _batch_step_age(job: str) -> float | None:
    """Seconds since the batch step of Slurm job ``job`` started on this node (its process is
    titled ``slurmstepd: [<job>.batch]``; the youngest, should an earlier run's be ending), or
    ``None`` if no such process is visible."""
    title = f"slurmstepd: [{job}.batch]".encode()
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    ages: list[float] = []
    for pid in pids:
        try:
            if not _is_slurmstepd(pid):
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if not f.read().rstrip(b"\0").startswith(title):
                    continue
        except OSError:
            continue
        age = _process_age(pid)
        if age is not None:
            ages.append(age)
    return min(ages, default=None)


__all__ = ["own_job_id", "process_start_time"]
