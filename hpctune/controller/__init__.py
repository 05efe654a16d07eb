"""The controller: the only writer of the journal, and the only one that decides.

Layered for size, each layer a subclass of the one before: :mod:`._base` (state, journal helpers),
:mod:`._ingest` (event files in), :mod:`._workers` (liveness, runs, pool), :mod:`._loop` (the loop,
the inbox, scheduling: :class:`Controller`).
"""

from __future__ import annotations

from hpctune.controller._loop import Controller
from hpctune.wire.lease import controller_alive

__all__ = ["Controller", "controller_alive"]
