"""The controller of a study directory: the scheduling core on the study's files, its lease
and the real clock."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hpctune.backends.base import Backend, Executor
from hpctune.controller.wire import FileWire
from hpctune.core.base import decision_wait_from_env
from hpctune.core.loop import SchedulingCore
from hpctune.curves.fitter import FitOptions
from hpctune.curves.service import CurveService
from hpctune.files import write_json_atomic
from hpctune.journal.epochs import branch_journal, point_link, prune_journals
from hpctune.journal.reader import load_state
from hpctune.journal.store import JournalReader, JournalWriter
from hpctune.spec import StudySpec
from hpctune.wire.clock import Clock, RealClock
from hpctune.wire.layout import StudyPaths
from hpctune.wire.lease import Lease, acquire
from hpctune.wire.permissions import check_study_dir, use_umask_of


class Controller(SchedulingCore):
    """Run a study to its end (or until stopped) from its journal in ``study_dir``.

    The scheduling core (:class:`~hpctune.core.loop.SchedulingCore`) on the study's files: it
    takes the study's lease, branches its epoch's journal, reads and writes the workers' and
    users' files through a :class:`~hpctune.controller.wire.FileWire`, and writes
    ``controller.json``.

    Args:
        study_dir: The study directory (created by ``hpctune launch``).
        executor: Starts and watches the workers, or a function of the spec that returns one.
        backend: The backend the workers run on: its curve-fit jobs (``[curves] backend``)
            and whether this process runs in one of its jobs; ``None``: fits in this process.
        clock: The time source (the real clock by default).
        decision_wait: Seconds a worker waits at a boundary for its step's decision (default
            ``HPCTUNE_DECISION_WAIT`` or 2).
        poll_interval, worker_timeout, startup_timeout, stop_grace, on_progress,
            curve_options: As :class:`~hpctune.core.base.CoreBase`'s.
        force: Take the study over even if another controller holds a live lease; that one is
            fenced (:mod:`hpctune.wire.lease`).

    Raises:
        AccessError: The study directory is writable by others or not yours.
        LeaseHeld: Another controller holds a live lease (without ``force``).
        Fenced: Another controller took over while this one was starting.
    """

    journal_dir: Path
    """This controller's epoch journal."""

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
        self.journal_dir = journal_dir
        self._journal_source = journal_source
        self.backend = backend
        super().__init__(
            paths=paths,
            wire=FileWire(paths),
            writer=writer,
            lease=lease,
            state=load_state(JournalReader(journal_dir)),
            executor=executor,
            clock=clock or RealClock(),
            poll_interval=poll_interval,
            worker_timeout=worker_timeout,
            startup_timeout=startup_timeout,
            decision_wait=decision_wait_from_env() if decision_wait is None else decision_wait,
            stop_grace=stop_grace,
            on_progress=on_progress,
            curve_options=curve_options,
            curve_service=self._curve_service,
        )

    def _curve_service(self, options: FitOptions | None) -> CurveService:
        """The study's fit service: result files in ``curves/``, job arrays of its backend."""
        curves = self.spec.curves
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
            else backend.fit_backend(self.paths, self.spec, options),
        )

    def start(self) -> None:
        """Start as the core does, then delete the journals of earlier epochs this one's
        branch no longer needs."""
        super().start()
        if self._journal_source is not None:
            prune_journals(self.paths.root, self.epoch, self._journal_source)

    def _write_beat(self, now: float, ended: bool, final: bool) -> None:
        """Write ``controller.json``: epoch, pid, host, Slurm job, time, state."""
        if not final:
            point_link(self.paths.root, self.journal_dir)  # if a fenced one moved it
        write_json_atomic(
            self.paths.controller_file,
            {
                "epoch": self.epoch,
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "job": os.environ.get("SLURM_JOB_ID"),
                "time": 0.0 if ended else now,
                "state": "detached" if final and self._detach else self.state.state.value,
            },
        )
