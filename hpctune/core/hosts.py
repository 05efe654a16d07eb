"""What each part of the scheduling core may use of the core: one narrow interface per part.

The core (:class:`~hpctune.core.loop.SchedulingCore`) is one class composed of parts, each
built with the core typed as one of these protocols, never as the core's class:
:class:`~hpctune.core.ingest.Ingest`, :class:`~hpctune.core.pool.WorkerPool`,
:class:`~hpctune.core.curves.CurveFits`, :class:`~hpctune.core.commands.TrialCommands`,
:class:`~hpctune.core.inbox.Inbox`, :class:`~hpctune.core.actions.TrialActions`,
:class:`~hpctune.core.views.Views`, :class:`~hpctune.core.elastic.ElasticFollower`,
:class:`~hpctune.core.storage.StorageWatch`,
:class:`~hpctune.core.policy_state.PolicyStateJournal` and the scheduling strategies. So mypy
refuses a part that reaches for anything its protocol does not list (the core's private
members in particular), and a reader sees at a glance what a part depends on. The core
satisfies all of them (checked where it builds its parts).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

    from hpctune.backends.base import Executor
    from hpctune.core.actions import TrialActions
    from hpctune.core.commands import TrialCommands
    from hpctune.core.curves import CurveFits
    from hpctune.core.elastic import ElasticFollower
    from hpctune.core.ingest import Ingest
    from hpctune.core.pool import WorkerPool
    from hpctune.core.scheduling import Scheduling
    from hpctune.core.settings import CoreSettings
    from hpctune.core.storage import StorageWatch
    from hpctune.core.wire import Wire
    from hpctune.journal import records as rec
    from hpctune.journal.entities import TrialRecord, WorkerRecord
    from hpctune.journal.memory import MemoryJournal
    from hpctune.journal.state import StudyRecord
    from hpctune.journal.store import JournalWriter
    from hpctune.policies import Event, Policy, StudyView
    from hpctune.policies.generators import Generator, Proposal
    from hpctune.spec import StudySpec
    from hpctune.study.states import StudyState, TrialStatus
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
    read cursors, the queue of policy events, and the storage watch (a worker's full disk)."""

    wire: Wire
    writer: JournalWriter | MemoryJournal
    paths: StudyPaths
    cursors: dict[str, int]
    pending_events: list[Event]
    last_event: dict[int, float]
    storage: StorageWatch


class PoolHost(Journaling, Protocol):
    """What :class:`~hpctune.core.pool.WorkerPool` uses: the executor, the wire's heartbeats
    and assignments, the ingest (a dead worker's last lines), the actions (decisions and
    assignments sent again), the settings (timeouts), and the commit."""

    wire: Wire
    executor: Executor
    ingest: Ingest
    actions: TrialActions
    settings: CoreSettings
    last_event: dict[int, float]

    @property
    def epoch(self) -> int:
        """The controller's lease epoch (written into its assignments)."""

    def live_workers(self) -> list[WorkerRecord]:
        """The workers not known to have ended."""

    def commit(self) -> None:
        """Commit the journal and write what follows from it."""

    def check_lease(self) -> None:
        """Raise ``Fenced`` if another controller took over."""


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


class InboxHost(Journaling, Protocol):
    """What :class:`~hpctune.core.inbox.Inbox` uses: the wire (the inbox's files) and the parts
    that carry the commands out."""

    wire: Wire
    commands: TrialCommands
    actions: TrialActions
    pool: WorkerPool
    elastic: ElasticFollower
    ingest: Ingest

    def request_stop(self, reason: str = "stop requested") -> None:
        """Stop the study cooperatively."""


class ActionsHost(Journaling, Protocol):
    """What :class:`~hpctune.core.actions.TrialActions` uses: the policy (its traits), the wire
    (assignments and decisions), the scheduling (a segment's seed and decision wait) and the
    generator's proposals."""

    policy: Policy
    wire: Wire
    scheduling: Scheduling

    @property
    def epoch(self) -> int:
        """The controller's lease epoch (written into its assignments and decisions)."""

    def propose(self, index: int, view: StudyView) -> Proposal:
        """The generator's proposal for trial ``index``."""


class ViewsHost(Journaling, Protocol):
    """What :class:`~hpctune.core.views.Views` uses: the pool's size (the elastic plan's) and
    the curve fits' predictions."""

    elastic: ElasticFollower
    curves: CurveFits


class ElasticHost(Journaling, Protocol):
    """What :class:`~hpctune.core.elastic.ElasticFollower` uses: the worker pool it sizes, the
    executor (how its backend bills devices) and the settings (when to plan again)."""

    pool: WorkerPool
    executor: Executor
    settings: CoreSettings

    def live_workers(self) -> list[WorkerRecord]:
        """The workers not known to have ended."""


class StorageHost(Journaling, Protocol):
    """What :class:`~hpctune.core.storage.StorageWatch` uses: the wire (is there room?), the
    paths and settings (for its error) and the commit (the rows kept pending)."""

    wire: Wire
    paths: StudyPaths
    settings: CoreSettings

    def commit(self) -> None:
        """Commit the journal and write what follows from it."""


class PolicyStateHost(Journaling, Protocol):
    """What :class:`~hpctune.core.policy_state.PolicyStateJournal` uses: the policy."""

    policy: Policy


class SchedulingHost(Journaling, Protocol):
    """What the scheduling strategies (:mod:`hpctune.core.scheduling`,
    :mod:`hpctune.core.stages`) use: the policy and generator, the other parts, and the core's
    free workers and random numbers."""

    policy: Policy
    generator: Generator
    paths: StudyPaths
    writer: JournalWriter | MemoryJournal
    settings: CoreSettings
    pool: WorkerPool
    ingest: Ingest
    commands: TrialCommands
    elastic: ElasticFollower
    actions: TrialActions

    def view(self, free_slots: int = 0) -> StudyView:
        """The policy's view of the study."""

    def propose(self, index: int, view: StudyView) -> Proposal:
        """The generator's proposal for trial ``index``."""

    def rng_for(self, event: Event) -> np.random.Generator:
        """The policy's random generator for ``event``."""

    def idle_workers(self) -> tuple[list[WorkerRecord], int]:
        """Idle workers, and how many slots are free."""
