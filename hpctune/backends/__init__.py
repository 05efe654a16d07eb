"""Backends: where a study's workers run and how its controller starts (plug-ins).

:mod:`.base` holds the interfaces (:class:`Backend`, :class:`Executor`), :mod:`.local` the
local backend (worker processes on this machine); Slurm's is :mod:`hpctune.slurm`, and other
packages add theirs through the entry-point group ``hpctune.backends``. :func:`choose_backend`
picks one for a command.
"""

from __future__ import annotations

from hpctune.backends.base import SUBMIT_TRIES, Backend, Executor, WorkerState
from hpctune.backends.local import LocalBackend, LocalExecutor, local_executor
from hpctune.backends.registry import choose_backend

__all__ = [
    "SUBMIT_TRIES",
    "Backend",
    "Executor",
    "LocalBackend",
    "LocalExecutor",
    "WorkerState",
    "choose_backend",
    "local_executor",
]
