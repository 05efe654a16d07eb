"""Slurm's side of the accounting: what sacct says the worker jobs held, to cross-check."""

from __future__ import annotations

import logging
import subprocess

from hpctune.journal.state import StudyRecord

logger = logging.getLogger(__name__)


def sacct_allocated_s(record: StudyRecord) -> float | None:
    """Seconds the study's worker jobs ran, every run of a requeued job included (``sacct -D``).

    Returns ``None`` when the study has no Slurm workers or sacct is not available.
    """
    jobs = [str(w.info["job_id"]) for w in record.workers.values() if w.info.get("job_id")]
    if not jobs:
        return None
    try:
        out = subprocess.run(
            ["sacct", "-n", "-P", "-X", "-D", "-j", ",".join(jobs), "-o", "JobID,ElapsedRaw"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        logger.warning("sacct failed: %s", exc)
        return None
    total = 0.0
    for line in out.splitlines():
        _, _, elapsed = line.partition("|")
        if elapsed.strip().isdigit():
            total += float(elapsed)
    return total
