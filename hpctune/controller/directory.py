"""The controller of a study directory: the scheduling core on the study's files, its lease
and the real clock."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hpctune.backends.base import Backend, Executor
from hpctune.controller.settings import settings_from_environment
from hpctune.controller.wire import FileWire
from hpctune.core import SchedulingCore
from hpctune.curves.fitter import FitOptions
from hpctune.curves.service import CurveService
from hpctune.files import write_json_atomic
from hpctune.journal.epochs import branch_journal, point_link, prune_journals
from hpctune.journal.reader import load_state
from hpctune.journal.state import StudyRecord
from hpctune.journal.store import JournalReader, JournalWriter
from hpctune.policies import Policy
from hpctune.spec import StudySpec
from hpctune.study.states import StudyState
from hpctune.wire.clock import Clock, RealClock
from hpctune.wire.layout import StudyPaths
from hpctune.wire.lease import Lease, acquire
from hpctune.wire.permissions import check_study_dir, use_umask_of


class Controller:
    """Run a study to its end (or until stopped) from its journal in ``study_dir``.

    It takes the study's lease, branches its epoch's journal and builds the scheduling core
    (:attr:`core`, a :class:`~hpctune.core.SchedulingCore`) on the study's files: a
    :class:`~hpctune.controller.wire.FileWire`, the journal writer fenced by the lease, the
    real clock, the settings of the environment
    (:func:`~hpctune.controller.settings.settings_from_environment`), the study's curve-fit
    service; it writes ``controller.json`` and prunes the journals of earlier epochs.

    Args:
        study_dir: The study directory (created by ``hpctune launch``).
        executor: Starts and watches the workers, or a function of the spec that returns one.
        backend: The backend the workers run on: its curve-fit jobs (``[curves] backend``)
            and whether this process runs in one of its jobs; ``None``: fits in this process.
        clock: The time source (the real clock by default).
        poll_interval: Seconds between iterations.
        worker_timeout: A worker whose heartbeat is older than this is lost.
        startup_timeout: A worker with no heartbeat this long after its start is lost.
        decision_wait: Seconds a worker waits at a boundary for its step's decision (default
            ``HPCTUNE_DECISION_WAIT`` or 2).
        stop_grace: Seconds a segment told to stop or suspend has to comply before its worker
            is cancelled (default ``HPCTUNE_STOP_GRACE`` or 300).
        on_progress: Called with the core after every iteration.
        curve_options: Learning-curve fit options (default: from ``[curves]``; for tests).
        policy: Replaces the policy the spec names (a policy that is not registered; tests).
        force: Take the study over even if another controller holds a live lease; that one is
            fenced (:mod:`hpctune.wire.lease`).

    Raises:
        AccessError: The study directory is writable by others or not yours.
        LeaseHeld: Another controller holds a live lease (without ``force``).
        Fenced: Another controller took over while this one was starting.
    """

    def __init__(
        self,
        study_dir: str | Path,
        executor: Executor | Callable[[StudySpec], Executor],
        *,
        backend: Backend | None = None,
        clock: Clock | None = None,
        poll_interval: float = 0.1,
        worker_timeout: float = 60.0,
        startup_timeout: float = 300.0,
        decision_wait: float | None = None,
        stop_grace: float | None = None,
        on_progress: Callable[[Any], None] | None = None,
        curve_options: FitOptions | None = None,
        policy: Policy | None = None,
        force: bool = False,
    ) -> None:
        paths = StudyPaths.of(study_dir)
        check_study_dir(paths.root)
        use_umask_of(paths.root)
        lease: Lease = acquire(paths.root, force=force)
        journal_dir, journal_source = branch_journal(paths.root, lease.epoch)
        lease.check()
        writer = JournalWriter(journal_dir, epoch=lease.epoch)
        writer.before_publish = lease.check
        state = load_state(JournalReader(journal_dir))
        self.paths = paths
        self.lease = lease
        self.journal_dir = journal_dir
        """This controller's epoch journal."""
        self.backend = backend
        self._journal_source = journal_source
        if not isinstance(executor, Executor):
            executor = executor(StudySpec.from_dict(state.spec))
        self.core = SchedulingCore(
            state,
            writer=writer,
            wire=FileWire(paths),
            executor=executor,
            clock=clock or RealClock(),
            paths=paths,
            lease=lease,
            settings=settings_from_environment(
                poll_interval=poll_interval,
                worker_timeout=worker_timeout,
                startup_timeout=startup_timeout,
                decision_wait=decision_wait,
                stop_grace=stop_grace,
            ),
            curve_service=self._curve_service,
            curve_options=curve_options,
            policy=policy,
            on_progress=on_progress,
            write_beat=self._write_beat,
            after_start=self._prune_journals,
        )

    # -- what a study directory adds to the core -----------------------------------------------

    def _curve_service(self, options: FitOptions | None) -> CurveService:
        """The study's fit service: result files in ``curves/``, job arrays of its backend."""
        spec = self.core.spec
        curves = spec.curves
        options = options or FitOptions(model=curves.model, budget=curves.budget)
        self.paths.curves.mkdir(exist_ok=True)
        backend = self.backend
        return CurveService(
            self.paths.curves,
            curves,
            options,
            in_job=backend is not None and backend.in_job(),
            jobs_backend=None
            if backend is None
            else backend.fit_backend(self.paths, spec, options),
        )

    def _prune_journals(self) -> None:
        """Delete the journals of earlier epochs this one's branch no longer needs (once the
        start's commit is in this epoch's journal)."""
        if self._journal_source is not None:
            prune_journals(self.paths.root, self.lease.epoch, self._journal_source)

    def _write_beat(self, time: float, state: str, final: bool) -> None:
        """Write ``controller.json``: epoch, pid, host, Slurm job, time, state."""
        if not final:
            point_link(self.paths.root, self.journal_dir)  # if a fenced one moved it
        write_json_atomic(
            self.paths.controller_file,
            {
                "epoch": self.lease.epoch,
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "job": os.environ.get("SLURM_JOB_ID"),
                "time": time,
                "state": state,
            },
        )

    # -- the core's loop and controls ----------------------------------------------------------

    @property
    def state(self) -> StudyRecord:
        """The study record as the core has it."""
        return self.core.state

    @property
    def spec(self) -> StudySpec:
        """The study's spec (with the settings changed since its launch)."""
        return self.core.spec

    def run(self) -> StudyState:
        """Run until the study ends or is stopped (:meth:`SchedulingCore.run`)."""
        return self.core.run()

    def start(self) -> None:
        """Record the start and re-send what a killed controller may not have sent."""
        self.core.start()

    def step(self) -> bool:
        """Run one iteration; return True when the controller should exit."""
        return self.core.step()

    def request_stop(self, reason: str = "stop requested") -> None:
        """Stop the study cooperatively: running trials suspend at their next report."""
        self.core.request_stop(reason)

    def signal_stop(self, reason: str) -> None:
        """Ask for a cooperative stop from a signal handler (applied at the next iteration)."""
        self.core.signal_stop(reason)

    def abort(self) -> None:
        """Kill every worker at the next iteration (safe in a signal handler)."""
        self.core.abort()

    def detach(self) -> None:
        """Leave the loop after the current iteration; the study and its workers go on."""
        self.core.detach()

    @property
    def aborted(self) -> bool:
        """True after :meth:`abort`."""
        return self.core.aborted

    @property
    def detached(self) -> bool:
        """True after :meth:`detach`."""
        return self.core.detached
