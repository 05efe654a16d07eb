"""The scheduling core: the study record, the policy and the rules that turn events into
journal records and effects, with no I/O, no process and no clock of its own.

:class:`SchedulingCore` (:mod:`.loop`) is composed of parts, each given the narrow interface it
needs (:mod:`.hosts`): :mod:`.ingest` (event lines in), :mod:`.pool` (workers' liveness, runs,
the pool's size), :mod:`.curves` (learning-curve fits), :mod:`.commands` (add/ask/tell),
:mod:`.elastic` (a deadline's plan) and the scheduling strategy (:mod:`.scheduling` trial by
trial, :mod:`.stages` a stage tree). Everything outside is reached through what it is given:
the journal writer, the :class:`~hpctune.core.wire.Wire`, the executor, the clock and the lease.

The controller of a study directory is this core on files (:class:`hpctune.controller.Controller`);
the simulator's is the same core in memory (:meth:`SchedulingCore.in_memory`).
"""

from __future__ import annotations

from hpctune.core.loop import SchedulingCore
from hpctune.core.wire import EventLines, Wire

__all__ = ["EventLines", "SchedulingCore", "Wire"]
