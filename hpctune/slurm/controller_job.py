"""The controller as a requeueable Slurm batch job.

``hpctune launch`` (on a login node) writes ``<study>/slurm/controller.sbatch`` from the template
below and submits it. The job runs ``hpctune controller <study>``, which runs the controller loop
with the Slurm executor. Near the time limit (``--signal=B:USR2@120``) or on preemption the
controller leaves its loop between two iterations (the journal is committed), asks Slurm to
requeue its job and exits; the restarted job carries on from the journal and adopts the workers.
"""

from __future__ import annotations

import contextlib
import math
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import FrameType
from typing import TextIO

from hpctune.analysis.progress import LiveProgress
from hpctune.analysis.summary import summary_lines
from hpctune.backends.base import Backend
from hpctune.controller import Controller
from hpctune.controller.launch import controller_logging, prepare_study_dir, resume_command
from hpctune.errors import SubmissionError
from hpctune.slurm.cluster import job_status, resolve_times
from hpctune.slurm.environment import export_lines
from hpctune.slurm.executor import SlurmExecutor
from hpctune.slurm.options import DEFAULT_CONTROLLER_TIME_MIN, JobOptions, slurm_spec
from hpctune.spec import StudySpec
from hpctune.study.states import StudyState
from hpctune.wire.layout import StudyPaths

CONTROLLER_SIGNAL_S = 120

TEMPLATE = """#!/bin/bash
# The controller of the hpctune study {name!s}, written by `hpctune launch`.
# Resubmit it with `hpctune resume {root!s}` rather than by hand.
#SBATCH --job-name=hpctune-{name!s}-controller
#SBATCH --output={log!s}
#SBATCH --open-mode=append
{options!s}
{body!s}
exec {python!s} -m hpctune.cli controller {root_quoted!s}
"""


def format_time(minutes: int) -> str:
    """Minutes as Slurm's ``D-HH:MM:00``."""
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    return f"{days}-{hours:02d}:{mins:02d}:00"


def controller_options(options: JobOptions) -> list[tuple[str, str | None]]:
    """The sbatch options of the controller's job as ``(name, value)`` (value None: a flag)."""
    pairs: list[tuple[str, str | None]] = [
        ("time", format_time(options.time_min or DEFAULT_CONTROLLER_TIME_MIN)),
        ("cpus-per-task", str(options.cpus)),
        ("mem", f"{math.ceil((options.mem_gb or 4) * 1024)}M"),
        ("requeue", None),
        ("signal", f"B:USR2@{CONTROLLER_SIGNAL_S}"),
    ]
    for key in ("partition", "account", "qos", "constraint"):
        value = getattr(options, key)
        if value is not None:
            pairs.append((key, value))
    for key, value in options.extra.items():
        pairs.append((key.replace("_", "-"), None if value is True else str(value)))
    return pairs


def render_controller_script(
    paths: StudyPaths,
    spec: StudySpec,
    python: str | None = None,
    env: Mapping[str, str] | None = None,
) -> str:
    """The sbatch script of a study's controller job.

    ``env`` (default: this process's) gives the variables the script exports explicitly
    (:mod:`hpctune.slurm.environment`), so that the controller runs the same under a site's
    ``SBATCH_EXPORT=NONE``. Unset time limits are the module default here; resolve them first
    (:func:`hpctune.slurm.cluster.resolve_times`) to get the partition's.
    """
    options = slurm_spec(spec).controller
    lines = [
        f"#SBATCH --{key}" if value is None else f"#SBATCH --{key}={shlex.quote(value)}"
        for key, value in controller_options(options)
    ]
    return TEMPLATE.format(
        name=spec.name,
        root=paths.root,
        root_quoted=shlex.quote(str(paths.root)),
        log=paths.logs / "controller-%j.out",
        options="\n".join(lines),
        body="\n".join([*export_lines(env), *options.setup]),
        python=shlex.quote(python or sys.executable),
    ).replace("\n\n\n", "\n\n")


def controller_jobs_file(paths: StudyPaths) -> Path:
    """The file listing the study's controller job ids, one per line."""
    return paths.root / "slurm" / "controller-jobs.txt"


def submit_controller(paths: StudyPaths, spec: StudySpec) -> str:
    """Write the controller's sbatch script, submit it and return the job id.

    An unset controller time limit becomes the partition's (:func:`resolve_times`).

    Raises:
        SubmissionError: sbatch failed (its message is included).
    """
    script = paths.root / "slurm" / "controller.sbatch"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(render_controller_script(paths, resolve_times(spec)))
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


def last_controller_job(paths: StudyPaths) -> str | None:
    """The id of the study's last controller job (``None`` if it never had one)."""
    try:
        jobs = controller_jobs_file(paths).read_text().split()
    except FileNotFoundError:
        return None
    return jobs[-1] if jobs else None


def queued_controller(paths: StudyPaths) -> str | None:
    """The id of the study's last controller job if it is still pending or running."""
    job = last_controller_job(paths)
    status = job_status(job) if job is not None else None
    if status is None:
        return None
    return job if status.state in ("PENDING", "RUNNING", "CONFIGURING", "REQUEUED") else None


@contextlib.contextmanager
def _job_signals(controller: Controller) -> Iterator[list[int]]:
    """In a Slurm job: USR2 (time limit near, preemption) or SIGTERM (scancel) detach the
    controller; the received signals are collected in the yielded list."""
    received: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        controller.detach()

    signums = (signal.SIGUSR2, signal.SIGTERM)
    previous = {s: signal.signal(s, handler) for s in signums}
    try:
        yield received
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def run_in_job(paths: StudyPaths, backend: Backend, *, out: TextIO | None = None) -> StudyState:
    """Run the controller inside its Slurm batch job, with workers as Slurm jobs.

    On SIGUSR2 (time limit near, preemption) the controller detaches and the job requeues
    itself; on SIGTERM (scancel) it detaches and exits (``hpctune resume`` submits a new one).
    """
    out = sys.stdout if out is None else out
    prepare_study_dir(paths)
    with controller_logging(paths):
        controller = Controller(
            paths.root,
            lambda spec: SlurmExecutor(paths.root, spec),
            backend=backend,
            poll_interval=0.5,
            worker_timeout=120.0,
            on_progress=LiveProgress(out, interval=30.0, live=False),
        )
        with _job_signals(controller) as received:
            state = controller.run()
        if signal.SIGUSR2 in received:
            job = os.environ.get("SLURM_JOB_ID", "")
            print(f"controller detached (SIGUSR2); requeueing job {job}", file=out, flush=True)
            subprocess.run(["scontrol", "requeue", job], check=False, timeout=60)
        elif controller.detached:
            print(
                f"controller detached (SIGTERM); resume with: "
                f"{resume_command(paths, local=False)}",
                file=out,
                flush=True,
            )
        else:
            for line in summary_lines(
                controller.state, paths.root, resume_command(paths, local=False)
            ):
                print(line, file=out)
        return state
