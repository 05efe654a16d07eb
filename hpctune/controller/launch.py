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
import shlex
import shutil
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, Protocol, TextIO

from hpctune.backends.base import Backend
from hpctune.backends.local import LocalBackend
from hpctune.controller import Controller
from hpctune.errors import AccessError, Interrupted, StudySpecError, UsageError
from hpctune.files import dumps
from hpctune.journal import state as st
from hpctune.journal.epochs import epoch_journal, point_link
from hpctune.journal.store import JournalWriter
from hpctune.spec import StudySpec
from hpctune.study.states import StudyState
from hpctune.wire.layout import StudyPaths
from hpctune.wire.lease import LeaseHeld, rival
from hpctune.wire.permissions import check_loadable, check_study_dir, use_study_umask, use_umask_of


def check_entry_point(spec: StudySpec) -> None:
    """Check, without importing it, that the entry point's function exists.

    Raises:
        StudySpecError: The file or module is missing, does not parse, or has no such function.
    """
    entry = spec.entry
    if entry.file is not None:
        if entry.file.exists():
            check_loadable(entry.file, "the training file")
        try:
            tree = ast.parse(entry.file.read_text(), filename=str(entry.file))
        except (OSError, SyntaxError) as exc:
            raise StudySpecError(
                spec.source, "study.entry_point", f"cannot read {entry.file}: {exc}"
            ) from exc
        first = entry.function.split(".")[0]
        binding = _top_level_binding(tree, first)
        if binding is None:
            raise StudySpecError(
                spec.source,
                "study.entry_point",
                f"{entry.file} defines no top-level function {entry.function!r}; "
                f"write it as 'def {entry.function}(ctx):' or fix the name after ':'",
            )
        if binding and "." not in entry.function:
            raise StudySpecError(
                spec.source,
                "study.entry_point",
                f"{entry.file} binds {first!r} to a {binding} (`{first} = ...`), which cannot "
                f"be called; the entry point must name a function: 'def {first}(ctx):'",
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


_LITERALS: dict[type, str] = {
    ast.Constant: "constant",
    ast.List: "list",
    ast.Tuple: "tuple",
    ast.Dict: "dict",
    ast.Set: "set",
    ast.JoinedStr: "str",
    ast.ListComp: "list",
    ast.DictComp: "dict",
    ast.SetComp: "set",
}


def _top_level_binding(tree: ast.Module, name: str) -> str | None:
    """How the module's top level last binds ``name``: ``""`` for something that may be
    callable (a def, a class, an import, an expression), the literal's kind (``"int"``,
    ``"list"``...) for a value that cannot be, ``None`` when it does not bind it."""
    found: str | None = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name == name:
                found = ""
        elif isinstance(node, ast.Import | ast.ImportFrom):
            if any((alias.asname or alias.name).split(".")[0] == name for alias in node.names):
                found = ""
        elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                kind = _LITERALS.get(type(node.value))
                if isinstance(node.value, ast.Constant):
                    kind = type(node.value.value).__name__
                found = kind or ""
    return found


def create_study(spec: StudySpec, elastic_plan: dict[str, Any] | None = None) -> StudyPaths:
    """Create the study directory: the spec copy, the folders and a journal with the spec.

    ``elastic_plan``: the data of an ``elastic_plan`` record (a study with a deadline, planned
    by ``hpctune launch``), journaled in the same commit, so that the controller follows it
    instead of planning again.

    Everything is created private (0700/0600, or 0750/0640 with ``share_with_group``),
    whatever the umask was (:mod:`hpctune.wire.permissions`).

    Raises:
        UsageError: The directory exists already (naming its controller if one runs).
        AccessError: The directory cannot be created there (a file on the path, no permission,
            a read-only filesystem such as /proc).
    """
    target = spec.directory
    use_study_umask(spec.share_with_group)
    adopt = _holds_only_a_profile(target)
    if (target.exists() or target.is_symlink()) and not adopt:
        running = ""
        if target.is_dir():
            held = rival(target)
            if held is not None:
                running = f"; its controller is running ({held.describe()}, epoch {held.epoch})"
        raise UsageError(
            f"study directory {target} exists already{running}: resume it with `hpctune resume "
            f"{target}` or choose another with --study-dir"
        )
    tmp = target.parent / f".{target.name}.creating-{uuid.uuid4().hex[:8]}"
    moved: list[str] = []
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
    except OSError as exc:
        raise AccessError(
            target,
            f"cannot create the study directory {target}: {exc.strerror} ({exc.filename}); "
            "choose a directory you can write with --study-dir or [study].directory",
        ) from exc
    try:
        paths = StudyPaths.of(tmp)
        paths.make_dirs()
        shutil.copyfile(spec.source, paths.spec_copy)
        journal = epoch_journal(tmp, 0)
        writer = JournalWriter(journal, create=True)
        data = {"state": StudyState.CREATED.value, "spec": spec.to_dict(), "reason": "launched"}
        now = time.time()
        writer.append("log", kind=st.STUDY, time=now, data=dumps(data))
        if elastic_plan is not None:
            writer.append("log", kind=st.ELASTIC_PLAN, time=now, data=dumps(elastic_plan))
        writer.commit({})
        point_link(tmp, journal)
        for name in adopt:  # `hpctune profile study.toml` measured it here: keep its files
            os.rename(target / name, tmp / name)
            moved.append(name)
        if adopt:
            os.rmdir(target)
        os.rename(tmp, target)
    except BaseException:
        for name in moved:  # put the profile back
            with contextlib.suppress(OSError):
                target.mkdir(exist_ok=True)
                os.rename(tmp / name, target / name)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return StudyPaths.of(target)


def _holds_only_a_profile(target: Path) -> list[str]:
    """The entries of ``target`` when it is a directory holding nothing but what
    ``hpctune profile study.toml`` writes there (``profile.json``, ``profile/``); else []."""
    if target.is_symlink() or not target.is_dir():
        return []
    paths = StudyPaths(target)
    allowed = {paths.profile.name, paths.profile_runs.name}
    names = sorted(os.listdir(target))
    return names if names and set(names) <= allowed else []


def prepare_study_dir(paths: StudyPaths) -> None:
    """Refuse a study directory others could change; set this process's umask for it.

    Raises:
        AccessError: The directory is writable by group or others, or owned by another user.
        JournalError: Its journal cannot be read.
    """
    check_study_dir(paths.root)
    use_umask_of(paths.root)


def ensure_no_controller(paths: StudyPaths) -> None:
    """Refuse while another controller holds a live lease on the study.

    Raises:
        LeaseHeld: Naming the controller (host, pid or Slurm job) and how to take over.
    """
    held = rival(paths.root)
    if held is not None:
        raise LeaseHeld(paths.root, held)


def resume_command(paths: StudyPaths, *, local: bool) -> str:
    """The exact command that carries a study on (``--local`` for a foreground run)."""
    return f"hpctune resume {shlex.quote(str(paths.root))}" + (" --local" if local else "")


@contextlib.contextmanager
def _signals(controller: Controller, out: TextIO, hint: str) -> Iterator[list[int]]:
    """First Ctrl-C or SIGTERM: stop cooperatively. Second Ctrl-C: kill the workers and exit.
    The received signals are collected in the yielded list (none counts as a retry)."""
    received: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        if len(received) == 1:
            print(
                f"\nstopping: running trials suspend at their next report "
                f"(Ctrl-C again to kill the workers); resume with `{hint}`",
                file=out,
                flush=True,
            )
            controller.signal_stop(f"interrupted by {signal.Signals(signum).name}")
        else:
            controller.abort()

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
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


class Progress(Protocol):
    """What shows a running study: called after every iteration with the controller, closed
    when the study ends (the CLI's :class:`~hpctune.analysis.progress.LiveProgress`)."""

    def __call__(self, controller: Any) -> None:
        """Show the study after an iteration of ``controller``."""

    def close(self) -> None:
        """The study ended: leave the display."""


def run_local(
    paths: StudyPaths,
    *,
    backend: Backend | None = None,
    out: TextIO | None = None,
    poll_interval: float = 0.1,
    force: bool = False,
    progress: Progress | None = None,
    on_end: Callable[[Controller, str], None] | None = None,
) -> StudyState:
    """Run the controller in the foreground until the study ends or is stopped.

    ``backend``: where the workers run (default: local processes; ``hpctune profile`` runs
    its short studies' workers as Slurm jobs under a controller here). ``progress`` shows the
    study as it runs; ``on_end(controller, hint)`` is called when it ended (also when
    interrupted), ``hint`` being the command that resumes it. ``out`` gets the lines of a
    Ctrl-C.

    Raises:
        LeaseHeld: Another controller holds a live lease (without ``force``).
        Fenced: Another controller took over while this one ran.
        Interrupted: Ctrl-C (exit 130) or SIGTERM (143) stopped the study; the message holds
            the exact resume command.
    """
    out = sys.stdout if out is None else out
    backend = backend or LocalBackend()
    prepare_study_dir(paths)
    if not force:
        ensure_no_controller(paths)
    hint = resume_command(paths, local=True)
    with controller_logging(paths):
        controller = Controller(
            paths.root,
            lambda spec: backend.executor(paths, spec),
            backend=backend,
            poll_interval=poll_interval,
            on_progress=progress,
            force=force,
        )
        try:
            with _signals(controller, out, hint) as received:
                state = controller.run()
        finally:
            if progress is not None:
                progress.close()
        if on_end is not None:
            on_end(controller, hint)
        if controller.aborted:
            print(f"workers killed; resume with: {hint}", file=out)
        if received:
            name = "Ctrl-C" if received[0] == signal.SIGINT else signal.Signals(received[0]).name
            raise Interrupted(f"interrupted ({name}); resume with: {hint}", received[0])
        return state


@contextlib.contextmanager
def controller_logging(paths: StudyPaths) -> Iterator[None]:
    """Log the controller to ``logs/controller.log`` while in the block."""
    handler = setup_controller_logging(paths)
    try:
        yield
    finally:
        logging.getLogger("hpctune").removeHandler(handler)
        handler.close()
