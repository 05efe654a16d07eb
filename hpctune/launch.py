"""Create a study directory from a spec, and run a study's controller in the foreground.

The study directory is built under a temporary name and renamed into place when complete, so a
failed launch leaves nothing behind and a study directory is never half-made.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from types import FrameType
from typing import TextIO

from hpctune.controller import Controller, controller_alive
from hpctune.errors import StudySpecError, UsageError
from hpctune.executors.local import LocalExecutor
from hpctune.files import dumps
from hpctune.journal import state as st
from hpctune.journal.store import JournalWriter
from hpctune.layout import StudyPaths
from hpctune.progress import LiveProgress
from hpctune.spec import StudySpec
from hpctune.states import StudyState
from hpctune.summary import best_text, policy_lines, study_line, trials_table


def check_entry_point(spec: StudySpec) -> None:
    """Check, without importing it, that the entry point's function exists.

    Raises:
        StudySpecError: The file or module is missing, does not parse, or has no such function.
    """
    entry = spec.entry
    if entry.file is not None:
        try:
            tree = ast.parse(entry.file.read_text(), filename=str(entry.file))
        except (OSError, SyntaxError) as exc:
            raise StudySpecError(
                spec.source, "study.entry_point", f"cannot read {entry.file}: {exc}"
            ) from exc
        names = (
            {
                node.name
                for node in tree.body
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            }
            | {
                target.id
                for node in tree.body
                if isinstance(node, ast.Assign)
                for target in node.targets
                if isinstance(target, ast.Name)
            }
            | {
                (alias.asname or alias.name)
                for node in tree.body
                if isinstance(node, ast.ImportFrom)
                for alias in node.names
            }
        )
        if entry.function.split(".")[0] not in names:
            raise StudySpecError(
                spec.source,
                "study.entry_point",
                f"{entry.file} defines no top-level function {entry.function!r}; "
                f"write it as 'def {entry.function}(ctx):' or fix the name after ':'",
            )
    elif entry.module is not None:
        try:
            found = importlib.util.find_spec(entry.module)
        except (ImportError, ValueError):
            found = None
        if found is None:
            raise StudySpecError(
                spec.source,
                "study.entry_point",
                f"module {entry.module!r} cannot be found on sys.path; "
                "install it or give a file path like 'train.py:train'",
            )


def create_study(spec: StudySpec) -> StudyPaths:
    """Create the study directory: the spec copy, the folders and a journal with the spec.

    Raises:
        UsageError: The directory exists already.
    """
    target = spec.directory
    if target.exists():
        raise UsageError(
            f"study directory {target} exists already: resume it with `hpctune resume {target}` "
            "or choose another with --study-dir"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.creating-{uuid.uuid4().hex[:8]}"
    try:
        paths = StudyPaths.of(tmp)
        paths.make_dirs()
        shutil.copyfile(spec.source, paths.spec_copy)
        writer = JournalWriter(paths.journal, create=True)
        data = {"state": StudyState.CREATED.value, "spec": spec.to_dict(), "reason": "launched"}
        writer.append("log", kind=st.STUDY, time=time.time(), data=dumps(data))
        writer.commit({})
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return StudyPaths.of(target)


def ensure_no_controller(paths: StudyPaths) -> None:
    """Refuse to start a second controller on a study whose controller is alive."""
    other = controller_alive(paths)
    if other is not None:
        raise UsageError(
            f"a controller is running on {paths.root} (pid {other.get('pid')} on "
            f"{other.get('host')}); stop it with `hpctune stop {paths.root}` or wait for it"
        )


@contextlib.contextmanager
def _signals(controller: Controller, out: TextIO) -> Iterator[None]:
    """First Ctrl-C or SIGTERM: stop cooperatively. Second Ctrl-C: kill the workers and exit."""
    count = 0

    def handler(signum: int, frame: FrameType | None) -> None:
        nonlocal count
        count += 1
        if count == 1:
            print(
                f"\nstopping: running trials suspend at their next report "
                f"(Ctrl-C again to kill the workers); resume with "
                f"`hpctune resume {controller.paths.root}`",
                file=out,
                flush=True,
            )
            controller.signal_stop(f"interrupted by signal {signum}")
        else:
            controller.abort()

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


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


def setup_controller_logging(paths: StudyPaths) -> logging.Handler:
    """Log the controller (one line per action) to ``logs/controller.log``."""
    paths.controller_log.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(paths.controller_log)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("hpctune")
    root.addHandler(handler)
    root.setLevel(os.environ.get("HPCTUNE_LOG_LEVEL", "INFO").upper())
    return handler


def run_local(
    paths: StudyPaths,
    *,
    out: TextIO = sys.stdout,
    poll_interval: float = 0.1,
    show_params: bool = False,
) -> StudyState:
    """Run the controller in the foreground with local workers; print progress and a summary.

    ``show_params``: print each ended trial's parameters below its completion line.
    """
    ensure_no_controller(paths)
    with _controller_logging(paths):
        progress = LiveProgress(out, show_params=show_params)
        controller = Controller(
            paths.root,
            lambda spec: local_executor(paths, spec),
            poll_interval=poll_interval,
            on_progress=progress,
        )
        try:
            with _signals(controller, out):
                state = controller.run()
        finally:
            progress.close()
        _print_summary(controller, out)
        if controller.aborted:
            print(f"workers killed; resume with: hpctune resume {paths.root}", file=out)
        return state


def run_in_slurm_job(paths: StudyPaths, *, out: TextIO = sys.stdout) -> StudyState:
    """Run the controller inside its Slurm batch job, with workers as Slurm jobs.

    On SIGUSR2 (time limit near, preemption) the controller detaches and the job requeues
    itself; on SIGTERM (scancel) it detaches and exits (``hpctune resume`` submits a new one).
    """
    from hpctune.slurm.executor import SlurmExecutor

    ensure_no_controller(paths)
    with _controller_logging(paths):
        controller = Controller(
            paths.root,
            lambda spec: SlurmExecutor(paths.root, spec),
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
                f"controller detached (SIGTERM); resume with: hpctune resume {paths.root}",
                file=out,
                flush=True,
            )
        else:
            _print_summary(controller, out)
        return state


def _print_summary(controller: Controller, out: TextIO) -> None:
    record = controller.state
    print(trials_table(record), file=out)
    print(study_line(record), file=out)
    for line in policy_lines(record):
        print(line, file=out)
    print(best_text(record, controller.paths.root), file=out)
    if record.state is StudyState.STOPPED:
        print(f"stopped; resume with: hpctune resume {controller.paths.root}", file=out)
    elif record.state is StudyState.FAILED:
        print(f"study failed: {record.reason}", file=out)


@contextlib.contextmanager
def _controller_logging(paths: StudyPaths) -> Iterator[None]:
    handler = setup_controller_logging(paths)
    try:
        yield
    finally:
        logging.getLogger("hpctune").removeHandler(handler)
        handler.close()


def local_executor(paths: StudyPaths, spec: StudySpec) -> LocalExecutor:
    """The local executor for a study's resources."""
    return LocalExecutor(paths.root, cpus_per_worker=spec.resources.cpus_per_worker)
