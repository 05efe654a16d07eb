"""What each part of the scheduling core may use of the core: one narrow interface per part.

The parts (:class:`~hpctune.core.ingest.Ingest`, :class:`~hpctune.core.pool.WorkerPool`,
:class:`~hpctune.core.curves.CurveFits`, :class:`~hpctune.core.commands.TrialCommands`,
:class:`~hpctune.core.elastic.ElasticFollower` and the scheduling strategies) are each given the
core typed as one of these protocols, never as the core's class, so mypy refuses a part that
reaches for anything its protocol does not list (the core's private members in particular), and
a reader sees at a glance what a part depends on. :class:`~hpctune.core.loop.SchedulingCore`
satisfies all of them (checked where it builds its parts).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

    from hpctune.backends.base import Executor
    from hpctune.core.commands import TrialCommands
    from hpctune.core.elastic import ElasticFollower
    from hpctune.core.ingest import Ingest
    from hpctune.core.pool import WorkerPool
    from hpctune.core.wire import Wire
    from hpctune.journal import records as rec
    from hpctune.journal.entities import SegmentRecord, TrialRecord, WorkerRecord
    from hpctune.journal.memory import MemoryJournal
    from hpctune.journal.state import StudyRecord
    from hpctune.journal.store import JournalWriter
    from hpctune.policies import Action, Event, Policy, StudyView
    from hpctune.policies.generators import Generator, Proposal
    from hpctune.spec import StudySpec
    from hpctune.study.states import Decision, StudyState, TrialStatus
    from hpctune.wire.clock import Clock
    from hpctune.wire.layout import StudyPaths


class Journaling(Protocol):
    """What every part may use: the study's record and spec, the clock, and the journal's
    helpers (every change to the record is a journal record)."""

    state: StudyRecord
    """The study record folded from the journal (read it; change it only through :meth:`log`)."""
    spec: StudySpec
    clock: Clock
    dirty: bool
    """Set when something changed that the policy should be asked about."""

    def log(self, entry: rec.LogEntry, *, trial: int = -1, segment: int = -1) -> None:
        """Append a journal record and apply it to :attr:`state`."""

    def warn(self, code: str, message: str, trial: int = -1) -> None:
        """Journal a warning."""

    def set_study(self, state: StudyState, reason: str, *, fail: bool = False) -> None:
        """Journal the study's new state."""

    def set_trial(
        self,
        trial: TrialRecord,
        status: TrialStatus,
        reason: str = "",
        *,
        error: str | None = None,
        retries: int | None = None,
    ) -> None:
        """Journal a trial's new status."""

    def after_commit(self, action: Callable[[], None]) -> None:
        """Run a file write that follows from the journal after the next commit."""


class IngestHost(Journaling, Protocol):
    """What :class:`~hpctune.core.ingest.Ingest` uses: the wire's event lines, the journal's
    read cursors, and the queue of policy events."""

    wire: Wire
    writer: JournalWriter | MemoryJournal
    paths: StudyPaths
    cursors: dict[str, int]
    pending_events: list[Event]
    last_event: dict[int, float]

    def storage_failed(self, what: str, where: str) -> None:
        """Pause new assignments: writes fail."""


class PoolHost(Journaling, Protocol):
    """What :class:`~hpctune.core.pool.WorkerPool` uses: the executor, the wire's heartbeats
    and assignments, the ingest (a dead worker's last lines), the timeouts, and the commit."""

    wire: Wire
    executor: Executor
    ingest: Ingest
    worker_timeout: float
    startup_timeout: float
    assignment_timeout: float
    stop_grace: float
    decision_sent: dict[int, float]
    last_event: dict[int, float]

    @property
    def epoch(self) -> int:
        """The controller's lease epoch (written into its assignments)."""

    def live_workers(self) -> list[WorkerRecord]:
        """The workers not known to have ended."""

    def send_decision(
        self,
        seg: SegmentRecord,
        decision: Decision,
        reason: str,
        *,
        log: bool = True,
        priority: float | None = None,
    ) -> None:
        """Journal and send a decision to a running segment."""

    def commit(self) -> None:
        """Commit the journal and write what follows from it."""

    def check_lease(self) -> None:
        """Raise ``Fenced`` if another controller took over."""

    def assignment_writer(self, seg: SegmentRecord) -> Callable[[], None]:
        """A function that writes the assignment of ``seg``."""


class CurvesHost(Journaling, Protocol):
    """What :class:`~hpctune.core.curves.CurveFits` uses: the policy (does it want a fit?), the
    study's paths (where fits are written) and the queue of policy events."""

    policy: Policy
    paths: StudyPaths
    pending_events: list[Event]


class CommandsHost(Journaling, Protocol):
    """What :class:`~hpctune.core.commands.TrialCommands` uses: the wire (answers), the journal
    writer (the command's cursor) and the generator's proposals."""

    wire: Wire
    writer: JournalWriter | MemoryJournal

    def view(self, free_slots: int = 0) -> StudyView:
        """The policy's view of the study."""

    def propose(self, index: int, view: StudyView) -> Proposal:
        """The generator's proposal for trial ``index``."""


class ElasticHost(Journaling, Protocol):
    """What :class:`~hpctune.core.elastic.ElasticFollower` uses: the worker pool it sizes and
    the executor (how its backend bills devices)."""

    pool: WorkerPool
    executor: Executor

    def live_workers(self) -> list[WorkerRecord]:
        """The workers not known to have ended."""


class SchedulingHost(Journaling, Protocol):
    """What the scheduling strategies (:mod:`hpctune.core.scheduling`,
    :mod:`hpctune.core.stages`) use: the policy and generator, the other parts, and the core's
    rules for turning actions into segments."""

    policy: Policy
    generator: Generator
    paths: StudyPaths
    writer: JournalWriter | MemoryJournal
    decision_wait: float
    pool: WorkerPool
    ingest: Ingest
    commands: TrialCommands
    elastic: ElasticFollower

    def view(self, free_slots: int = 0) -> StudyView:
        """The policy's view of the study."""

    def propose(self, index: int, view: StudyView) -> Proposal:
        """The generator's proposal for trial ``index``."""

    def rng_for(self, event: Event) -> np.random.Generator:
        """The policy's random generator for ``event``."""

    def idle_workers(self) -> tuple[list[WorkerRecord], int]:
        """Idle workers, and how many slots are free."""

    def trial_for(self, action: Action, view: StudyView) -> TrialRecord | None:
        """The trial an action places (created if new)."""

    def apply_action(self, action: Action, event: Event | None) -> None:
        """Carry out one policy action."""

    def assign(self, trial: TrialRecord, worker_id: str, until_step: int | None) -> None:
        """Start a segment of ``trial`` on a worker."""

    def new_segment(
        self,
        trial: TrialRecord,
        worker_id: str,
        start: int,
        until: int,
        row: int | None,
        *,
        checkpoint_steps: list[int] | None = None,
        stages: list[int] | None = None,
    ) -> SegmentRecord:
        """Journal a segment and queue its assignment file."""
