"""The scheduling core: the study record, the policy and the rules that turn events into
journal records and effects, with no I/O, no process and no clock of its own.

:class:`SchedulingCore` (:mod:`.loop`) is one class given everything outside it (the journal
writer, the :class:`~hpctune.core.wire.Wire`, the executor, the clock, the lease, the curve-fit
service and its :class:`~hpctune.core.settings.CoreSettings`) and composed of parts, each given
the narrow interface it needs (:mod:`.hosts`): :mod:`.ingest` (event lines in), :mod:`.pool`
(workers' liveness, runs, the pool's size), :mod:`.curves` (learning-curve fits),
:mod:`.actions` (the policy's actions carried out), :mod:`.views` (the policy's view),
:mod:`.inbox` and :mod:`.commands` (users' commands, add/ask/tell), :mod:`.elastic` (a
deadline's plan), :mod:`.storage` (writes that fail), :mod:`.policy_state` (the policy's state
journaled) and the scheduling strategy (:mod:`.scheduling` trial by trial, :mod:`.stages` a
stage tree).

The controller of a study directory (:class:`hpctune.controller.Controller`) builds and holds
one on the study's files; the simulator (:class:`hpctune.simulator.Simulator`) builds and holds
one in memory.
"""

from __future__ import annotations

from hpctune.core.loop import BeatWriter, SchedulingCore
from hpctune.core.settings import CoreSettings
from hpctune.core.wire import EventLines, Wire

__all__ = ["BeatWriter", "CoreSettings", "EventLines", "SchedulingCore", "Wire"]
