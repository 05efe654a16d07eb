"""Backends: where workers run (:class:`Executor`) and how a study's controller starts.

An executor knows nothing of trials or policies. It starts worker processes or jobs for given
worker ids and returns, for each, a JSON-able ``info`` dict that the controller stores in the
journal, so that a restarted controller (a new process, maybe on another node) can still ask
whether that worker lives and cancel it. Liveness answers are a second opinion: the worker's
heartbeat file is the first.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Any

from hpctune.errors import PlanningError, UsageError
from hpctune.journal.state import StudyRecord
from hpctune.spec import StudySpec
from hpctune.study.states import StudyState
from hpctune.wire.layout import StudyPaths

#: Worker submissions that fail in a row before the study fails (the executor's message).
SUBMIT_TRIES = 5


class WorkerState(Enum):
    """What the executor knows of a worker's process or job."""

    PENDING = "pending"  # waiting in the queue (also after a requeue): no process now
    RUNNING = "running"  # a process exists
    GONE = "gone"  # finished, failed, cancelled: it will not run again
    UNKNOWN = "unknown"  # no answer (another host, squeue failing)


class Executor(abc.ABC):
    """Base class of executors (local processes; Slurm jobs through submitit)."""

    name: str = ""

    @abc.abstractmethod
    def start(
        self, worker_ids: list[str], devices: int | None = None
    ) -> dict[str, dict[str, Any]]:
        """Start one worker per id (as one batch where the backend allows); return their infos.

        ``devices``: the size of each worker, in devices of the study's ``[resources]`` worker
        (a GPU with its CPUs, or a CPU), as the elastic plan gives it: the worker holds
        ``devices`` times the resources of one, and its trials see ``ctx.devices ==
        devices``; ``None``: the spec's worker as it is.

        Raises:
            SubmissionError: A worker could not be started.
        """

    @abc.abstractmethod
    def state(self, worker_id: str, info: Mapping[str, Any]) -> WorkerState:
        """Where the worker's process or job stands (a second opinion after its heartbeat)."""

    @abc.abstractmethod
    def cancel(self, worker_id: str, info: Mapping[str, Any]) -> None:
        """Stop the worker at once (SIGKILL or scancel). Idempotent."""

    def end_reason(self, worker_id: str, info: Mapping[str, Any]) -> str:
        """How a worker that is gone ended, as far as the backend knows ("" if it does not):
        its exit code or signal, "out of memory" when the kernel or Slurm says so."""
        return ""

    def end_time(self, worker_id: str, info: Mapping[str, Any]) -> float | None:
        """When a worker that is gone released its allocation, as the backend accounts it
        (Slurm: the job's end in sacct), or ``None`` if the backend does not say."""
        return None

    def close(self) -> None:  # noqa: B027
        """Release resources held by the executor (not the workers)."""

    def use_spec(self, spec: Any) -> None:  # noqa: B027
        """Start the next workers with changed settings (``resume --slurm``); default: none."""

    def output_path(self, worker_id: str, info: Mapping[str, Any]) -> Path | None:
        """The file that holds the worker's own output (a traceback when it dies at start)."""
        return None

    def billing_weight(
        self, spec: StudySpec, partition: str | None, gpu: bool
    ) -> tuple[float, str]:
        """Billed units per device-hour of the study's workers (:meth:`Backend.billing_weight`).

        Raises:
            PlanningError: The backend cannot say.
        """
        raise PlanningError(
            f'[resources] billing_weight = "partition" needs a backend that bills its '
            f"partitions (Slurm), not {self.name}; give a number"
        )

    #: At most this many workers wait to start at once (Slurm: ``[slurm] max_pending``).
    max_pending: int = 16


class Backend(abc.ABC):
    """Where a study's workers run, and how its controller is started: a plug-in.

    A backend is found by name (``local``, ``slurm``, or another package's entry point in the
    group ``hpctune.backends``, :mod:`hpctune.plugins`) and built without arguments; the
    command line and the Python API choose one per command (``--local``, ``--backend NAME``,
    else the first cluster backend that is :meth:`available`). The scheduling core only ever
    sees its :class:`Executor` (and its curve fits, :meth:`fit_backend`).

    Attributes:
        name: The registered name.
        title: The name people read (``"Slurm"``; default: ``name``).
        section: The study.toml section the backend owns (``"slurm"``), or ``None``.
        runs_controller_here: ``True``: the controller runs in the foreground of the command
            that launches or resumes the study (``local``); ``False``: the backend submits it
            (:meth:`submit_controller`) and the command returns.
        cluster: Chosen by default when :meth:`available` (a batch system on this machine).
    """

    name: str = ""
    title: str = ""
    section: str | None = None
    runs_controller_here: bool = True
    cluster: bool = False

    def available(self) -> bool:
        """Whether the backend can be used from here (its commands are on PATH)."""
        return True

    def parse_options(self, table: Mapping[str, Any], source: Path) -> dict[str, Any]:
        """Check the backend's study.toml section and return its JSON form (what the spec's
        ``backend_options[section]`` holds).

        Raises:
            StudySpecError: Naming ``<section>.<key>`` and the fix.
        """
        return dict(table)

    @abc.abstractmethod
    def executor(self, paths: StudyPaths, spec: StudySpec) -> Executor:
        """The executor of the study's workers."""

    def fit_backend(self, paths: StudyPaths, spec: StudySpec, options: Any) -> Any:
        """A factory of the backend's curve-fit jobs (a :class:`~hpctune.curves.service.
        FitBackend` built when first needed), or ``None``: fits run in the controller's
        process pool only."""
        return None

    def in_job(self) -> bool:
        """Whether this process runs inside one of the backend's jobs (curve fits may then
        go to job arrays, ``[curves] backend = "auto"``)."""
        return False

    def check(self, spec: StudySpec, source: Path | None = None) -> None:  # noqa: B027
        """Check, before anything is created, that the backend would take the study's jobs
        (``sbatch --test-only``); ``source``: what changed settings came from.

        Raises:
            StudySpecError: A setting the backend refuses, naming it.
            SubmissionError: The backend does not answer.
        """

    def describe(self, spec: StudySpec) -> list[str]:
        """What ``launch --dry-run`` prints of the jobs the backend would submit."""
        return []

    def run_controller(self, paths: StudyPaths) -> StudyState:
        """Run the study's controller in the job :meth:`submit_controller` submitted."""
        raise NotImplementedError(f"the {self.name} backend submits no controller job")

    def submit_controller(self, paths: StudyPaths, spec: StudySpec) -> str:
        """Submit the study's controller (``runs_controller_here`` false); return its job id.

        Raises:
            SubmissionError: The submission failed.
        """
        raise NotImplementedError(f"the {self.name} backend runs the controller in place")

    def controller_queued(self, paths: StudyPaths) -> str | None:
        """The id of the study's controller job while it is queued or running, else ``None``."""
        return None

    def status(
        self, paths: StudyPaths, record: StudyRecord, controller_alive: bool
    ) -> dict[str, Any] | None:
        """What ``status`` adds for a study that ran on this backend (JSON), or ``None`` when
        it did not or the backend cannot be asked from here."""
        return None

    def status_lines(self, status: Mapping[str, Any], root: str) -> list[str]:
        """:meth:`status` as lines of text."""
        return []

    def allocated_seconds(self, record: StudyRecord) -> float | None:
        """Seconds the study's worker jobs held their allocation as the backend accounts them
        (``status --sacct``), or ``None`` when it cannot say."""
        return None

    def change_settings(
        self, spec: StudySpec, assignments: Sequence[str], other: StudySpec | None
    ) -> tuple[StudySpec, dict[str, Any] | None, list[str]] | None:
        """``resume --set KEY=VALUE`` (and ``--spec FILE``: ``other``): the spec with the
        backend's settings changed, the inbox command that makes the controller use them
        (``None`` when they stay the same), and lines saying what changed; ``None`` when
        nothing was asked.

        Raises:
            StudySpecError: A setting is unknown or invalid.
        """
        if assignments or other is not None:
            raise UsageError(f"the {self.name} backend has no settings to change")
        return None

    def billing_weight(
        self, spec: StudySpec, partition: str | None, gpu: bool
    ) -> tuple[float, str]:
        """Billed units per device-hour of the study's workers (``[resources] billing_weight
        = "partition"``), and where the figure came from.

        Raises:
            PlanningError: The backend cannot say.
        """
        raise PlanningError(
            f'[resources] billing_weight = "partition" needs a backend that bills its '
            f"partitions (Slurm), not {self.name}; give a number"
        )
