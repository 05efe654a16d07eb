"""The controller as a requeueable Slurm batch job.

``hpctune launch`` (on a login node) writes ``<study>/slurm/controller.sbatch`` from the template
below and submits it. The job runs ``hpctune controller <study>``, which runs the controller loop
with the Slurm executor. Near the time limit (``--signal=B:USR2@120``) or on preemption the
controller leaves its loop between two iterations (the journal is committed), asks Slurm to
requeue its job and exits; the restarted job carries on from the journal and adopts the workers.
"""

from __future__ import annotations

import math
import shlex
import subprocess
import sys
from pathlib import Path

from hpctune.errors import SubmissionError
from hpctune.layout import StudyPaths
from hpctune.spec import StudySpec

CONTROLLER_SIGNAL_S = 120

TEMPLATE = """#!/bin/bash
# The controller of the hpctune study {name!s}, written by `hpctune launch`.
# Resubmit it with `hpctune resume {root!s}` rather than by hand.
#SBATCH --job-name=hpctune-{name!s}-controller
#SBATCH --output={log!s}
#SBATCH --open-mode=append
#SBATCH --time={time!s}
#SBATCH --cpus-per-task={cpus!s}
#SBATCH --mem={mem!s}
#SBATCH --requeue
#SBATCH --signal=B:USR2@{signal!s}
{options!s}
{setup!s}
exec {python!s} -m hpctune.cli controller {root_quoted!s}
"""


def format_time(minutes: int) -> str:
    """Minutes as Slurm's ``D-HH:MM:00``."""
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    return f"{days}-{hours:02d}:{mins:02d}:00"


def render_controller_script(paths: StudyPaths, spec: StudySpec, python: str | None = None) -> str:
    """The sbatch script of a study's controller job."""
    options = spec.slurm.controller
    lines = []
    for key in ("partition", "account", "qos", "constraint"):
        value = getattr(options, key)
        if value is not None:
            lines.append(f"#SBATCH --{key}={shlex.quote(value)}")
    for key, value in options.extra.items():
        flag = key.replace("_", "-")
        lines.append(
            f"#SBATCH --{flag}" if value is True else f"#SBATCH --{flag}={shlex.quote(str(value))}"
        )
    mem_mb = math.ceil((options.mem_gb or 4) * 1024)
    return TEMPLATE.format(
        name=spec.name,
        root=paths.root,
        root_quoted=shlex.quote(str(paths.root)),
        log=paths.logs / "controller-%j.out",
        time=format_time(options.time_min),
        cpus=options.cpus,
        mem=f"{mem_mb}M",
        signal=CONTROLLER_SIGNAL_S,
        options="\n".join(lines),
        setup="\n".join(options.setup),
        python=shlex.quote(python or sys.executable),
    ).replace("\n\n\n", "\n\n")


def controller_jobs_file(paths: StudyPaths) -> Path:
    """The file listing the study's controller job ids, one per line."""
    return paths.root / "slurm" / "controller-jobs.txt"


def submit_controller(paths: StudyPaths, spec: StudySpec) -> str:
    """Write the controller's sbatch script, submit it and return the job id.

    Raises:
        SubmissionError: sbatch failed (its message is included).
    """
    script = paths.root / "slurm" / "controller.sbatch"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(render_controller_script(paths, spec))
    try:
        result = subprocess.run(
            ["sbatch", "--parsable", str(script)], capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise SubmissionError(f"sbatch {script} failed: {exc}") from exc
    if result.returncode != 0:
        raise SubmissionError(
            f"sbatch {script} failed: {result.stderr.strip()}; check [slurm.controller] "
            "(partition, account, qos, time) in the study.toml"
        )
    job_id = result.stdout.strip().split(";")[0]
    with open(controller_jobs_file(paths), "a") as f:
        f.write(job_id + "\n")
    return job_id


def queued_controller(paths: StudyPaths) -> str | None:
    """The id of the study's last controller job if it is still pending or running."""
    try:
        jobs = controller_jobs_file(paths).read_text().split()
    except FileNotFoundError:
        return None
    if not jobs:
        return None
    try:
        out = subprocess.run(
            ["squeue", "-h", "-j", jobs[-1], "-o", "%T"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return jobs[-1] if out in ("PENDING", "RUNNING", "CONFIGURING", "REQUEUED") else None
