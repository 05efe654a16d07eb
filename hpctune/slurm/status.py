"""What ``hpctune status`` adds on Slurm: the controller job waiting in the queue (and why),
worker jobs waiting (and why), worker submissions that fail (with Slurm's message)."""

from __future__ import annotations

import shutil
from typing import Any

from hpctune.backends.base import SUBMIT_TRIES
from hpctune.journal.state import StudyRecord
from hpctune.slurm.cluster import job_status, pending_reasons
from hpctune.slurm.controller_job import last_controller_job
from hpctune.study.states import StudyState, WorkerLife
from hpctune.wire.layout import StudyPaths

FINAL = (StudyState.FINISHED, StudyState.STOPPED, StudyState.FAILED)


def slurm_status(paths: StudyPaths, record: StudyRecord, controller_alive: bool) -> dict[str, Any]:
    """The Slurm side of a study's status (``status --json``: ``study.slurm``).

    Keys: ``controller_job`` (id, squeue state and reason, and a hint for reasons that need
    a change of settings; only when no controller is alive), ``submission`` (failures in a
    row and Slurm's last message), ``pending_workers`` (job id -> squeue reason).
    """
    out: dict[str, Any] = {
        "controller_job": None,
        "submission": {"failures": record.submit_failures, "error": record.submit_error},
        "pending_workers": {},
    }
    if record.state in FINAL or shutil.which("squeue") is None:
        return out
    job = last_controller_job(paths)
    if job is not None and not controller_alive:
        status = job_status(job)
        out["controller_job"] = {
            "job": job,
            "state": status.state if status else "gone",
            "reason": status.reason if status else "",
            "hint": status.hint if status else "",
        }
    waiting = [
        str(w.info["job_id"])
        for w in record.workers.values()
        if w.state is WorkerLife.STARTED and w.info.get("job_id") and not w.runs
    ]
    out["pending_workers"] = pending_reasons(waiting)
    return out


def status_lines(data: dict[str, Any], root: str) -> list[str]:
    """The lines ``hpctune status`` prints for :func:`slurm_status`."""
    lines = []
    job = data["controller_job"]
    if job is not None:
        if job["state"] == "PENDING":
            text = f"controller: job {job['job']} pending in the queue ({job['reason']})"
            if job["hint"]:
                text += (
                    f": {job['hint']} in [slurm.controller] (`scancel {job['job']}`, then "
                    f"`hpctune resume {root} --slurm controller.KEY=VALUE`)"
                )
            lines.append(text)
        elif job["state"] == "gone":
            lines.append(
                f"controller: not running (job {job['job']} has left the queue); resume with "
                f"`hpctune resume {root}`"
            )
        else:
            lines.append(f"controller: job {job['job']} {job['state'].lower()}, starting")
    submission = data["submission"]
    if submission["failures"]:
        lines.append(
            f"workers: submission failed {submission['failures']} time(s) in a row (the "
            f"study fails after {SUBMIT_TRIES}): {submission['error']}"
        )
    pending = data["pending_workers"]
    if pending:
        reasons = sorted(set(pending.values()))
        lines.append(f"workers: {len(pending)} job(s) waiting in the queue ({', '.join(reasons)})")
    return lines
