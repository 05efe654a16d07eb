"""No I/O and no clock while a policy decides: an audit hook and a patched ``time`` module.

:func:`forbid_io` records (and refuses, by raising :class:`ForbiddenIOError`) every attempt of the
calling thread to open a file, list a directory, create a socket or start a process (the audit
events of :data:`FORBIDDEN_EVENTS` and :data:`FORBIDDEN_PREFIXES`) or to sleep, and every call of
a clock function of the :mod:`time` module (:data:`CLOCK_FUNCTIONS`). A policy that catches the
error is still caught: the attempt is recorded before the error is raised.

Audit hooks cannot be removed, so the hook is installed once and does nothing unless a guard is
active in the thread that raised the event. The import system (a module imported for the first
time inside ``decide``), :mod:`logging` and :mod:`linecache` (a warning showing its source line)
are allowed. Not seen: ``os.stat`` (not audited), ``datetime.now`` and clock functions imported by
name (``from time import time``) before the guard started.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

#: Audit events refused by name (``time.sleep``, audited from Python 3.12, is patched as well).
FORBIDDEN_EVENTS = frozenset({"open", "time.sleep"})
#: Audit events refused by prefix: the file system, sockets, processes, databases, signals.
FORBIDDEN_PREFIXES = (
    "os.",
    "shutil.",
    "socket.",
    "subprocess.",
    "glob.",
    "tempfile.",
    "urllib.",
    "http.",
    "ftplib.",
    "smtplib.",
    "imaplib.",
    "poplib.",
    "nntplib.",
    "telnetlib.",
    "sqlite3.",
    "ctypes.",
    "mmap.",
    "fcntl.",
    "signal.",
    "pty.",
    "webbrowser.",
)
#: Functions of :mod:`time` that read a clock (a policy reads ``view.now``).
CLOCK_FUNCTIONS = (
    "time",
    "time_ns",
    "monotonic",
    "monotonic_ns",
    "perf_counter",
    "perf_counter_ns",
    "process_time",
    "process_time_ns",
    "thread_time",
    "thread_time_ns",
    "clock_gettime",
    "clock_gettime_ns",
)
#: Modules whose frames may do what the guard refuses (import system, logging, warnings' lines).
_EXEMPT_MODULES = frozenset(
    {"importlib._bootstrap", "importlib._bootstrap_external", "zipimport", "linecache"}
)


class ForbiddenIOError(PermissionError):
    """Raised inside a guarded call that tried I/O or read the clock."""


@dataclass(frozen=True)
class Violation:
    """One refused attempt.

    Attributes:
        kind: ``"io"`` (an audit event) or ``"clock"`` (a clock function).
        what: The audit event (``open``, ``socket.__new__``, ...) or ``time.<function>``.
        detail: The event's arguments, shortened.
    """

    kind: str
    what: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.what}({self.detail})" if self.detail else f"{self.what}()"


_guards: dict[int, list[Violation]] = {}  # thread id -> the attempts of its innermost guard
_clock_patches = 0  # guards open in any thread (the clock is patched while > 0)
_originals: dict[str, Any] = {}
_lock = threading.Lock()
_hook_installed = False


def _exempt(frame: FrameType | None) -> bool:
    """True if the stack above ``frame`` runs the import system, logging or linecache."""
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module in _EXEMPT_MODULES or module == "logging" or module.startswith("logging."):
            return True
        frame = frame.f_back
    return False


def _current_guard() -> list[Violation] | None:
    return _guards.get(threading.get_ident())


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _guards:  # the fast path of every audit event of the process
        return
    if event not in FORBIDDEN_EVENTS and not event.startswith(FORBIDDEN_PREFIXES):
        return
    guard = _current_guard()
    if guard is None or _exempt(sys._getframe(1)):
        return
    violation = Violation("io", event, repr(args)[:120])
    guard.append(violation)
    raise ForbiddenIOError(f"{violation} while deciding: a policy does no I/O")


def _install_hook() -> None:
    global _hook_installed
    with _lock:
        if not _hook_installed:
            sys.addaudithook(_audit)
            _hook_installed = True


def _patched(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    """``time.<name>`` refusing calls from guarded threads (``sleep`` waits: an I/O attempt)."""
    kind = "io" if name == "sleep" else "clock"
    why = "a policy does not wait" if kind == "io" else "a policy reads view.now"

    def guarded(*args: Any) -> Any:
        guard = _current_guard()
        if guard is not None and not _exempt(sys._getframe(1)):
            violation = Violation(kind, f"time.{name}")
            guard.append(violation)
            raise ForbiddenIOError(f"{violation} while deciding: {why}")
        return original(*args)

    guarded.__wrapped__ = original  # type: ignore[attr-defined]
    return guarded


@contextlib.contextmanager
def forbid_io() -> Iterator[list[Violation]]:
    """Refuse I/O and clock reads of this thread inside the block; yield the list of attempts.

    Blocks may nest (the inner one records the attempts made inside it) and run in several
    threads at once; each thread is guarded only by its own blocks.
    """
    _install_hook()
    thread = threading.get_ident()
    outer = _guards.get(thread)
    violations: list[Violation] = []
    with patched_clocks():
        _guards[thread] = violations
        try:
            yield violations
        finally:
            if outer is None:
                del _guards[thread]
            else:
                _guards[thread] = outer


@contextlib.contextmanager
def patched_clocks() -> Iterator[None]:
    """Keep the :mod:`time` module's clocks patched for the block (they refuse calls only from
    a thread inside :func:`forbid_io`), so that many short guarded blocks inside it do not
    patch and restore them each time."""
    global _clock_patches
    with _lock:
        if _clock_patches == 0:
            for name in (*CLOCK_FUNCTIONS, "sleep"):
                original = getattr(time, name, None)
                if original is not None:
                    _originals[name] = original
                    setattr(time, name, _patched(name, original))
        _clock_patches += 1
    try:
        yield
    finally:
        with _lock:
            _clock_patches -= 1
            if _clock_patches == 0:
                for name, original in _originals.items():
                    setattr(time, name, original)
                _originals.clear()
