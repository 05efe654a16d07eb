"""hpctune from Python: open, launch, resume and replay studies, compare policies in the
simulator (the command line calls these).

>>> spec = load_spec("jobs/digits/study.toml")                    # doctest: +SKIP
>>> study = launch(spec, local=True)                              # doctest: +SKIP
>>> study.best_trial().params                                     # doctest: +SKIP
>>> study = open_study("jobs/digits/runs/digits-20261125-024200") # doctest: +SKIP
>>> study.trials_frame()                                          # doctest: +SKIP

Everything here goes through the same study directory, journal and controller as ``hpctune
launch``: a study launched from Python is read, resumed and exported from the shell, and the
other way round.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from hpctune.analysis.lineage import replay_spec
from hpctune.analysis.pareto import FrontTrial, pareto_front
from hpctune.analysis.progress import LiveProgress
from hpctune.analysis.summary import summary_lines
from hpctune.backends import Backend, choose_backend
from hpctune.controller import Controller
from hpctune.controller.launch import check_entry_point, create_study, prepare_study_dir, run_local
from hpctune.elastic.status import PlanStatus, study_plan_status
from hpctune.errors import JournalError
from hpctune.export.hdf5 import Hdf5Journal, is_hdf5_export
from hpctune.journal.reader import StudyReader
from hpctune.spec import StudySpec, load_spec, with_deadline
from hpctune.study.states import StudyState
from hpctune.wire.asktell import AskedTrial, AskTellClient
from hpctune.wire.layout import StudyPaths

if TYPE_CHECKING:
    from hpctune.simulator import Comparison, SimulationOptions


class Study(StudyReader):
    """A study as of its journal's last commit: trials, curves, the best trial, frames (see
    :class:`~hpctune.journal.reader.StudyReader`), and, opened with ``write=True``, ask/tell
    and added trials through the running controller's inbox (:mod:`hpctune.wire.asktell`).
    """

    _writable = False

    def elastic_plan(self, now: float | None = None) -> PlanStatus | None:
        """The elastic plan a study with ``[resources] deadline`` follows: per stage its
        trials, devices per trial and workers, predicted against measured stage ends, and the
        predicted completion time and cost against those so far; ``None`` without a plan."""
        if self.record.elastic_plan is None:
            return None
        return study_plan_status(self.record, now)

    def pareto_front(self) -> list[FrontTrial]:
        """The completed trials no other completed trial dominates in the study's objectives
        (``[study] objectives``; with one metric: the best trial and its ties), by id."""
        return pareto_front(self.record)

    def refresh(self) -> Study:
        """A new snapshot of the study (same mode)."""
        return open_study(self.directory, write=self._writable)

    def _client(self) -> AskTellClient:
        if not self._writable:
            raise JournalError(
                f"{self.directory} was opened read-only; open it with "
                "hpctune.open_study(directory, write=True) to ask for and tell trials"
            )
        return AskTellClient(self.directory)

    def ask(self, timeout: float = 120.0) -> AskedTrial:
        """Ask the running controller for a new trial from the study's generator.

        The trial is *external*: no worker trains it; report it with :meth:`tell`. Waits up to
        ``timeout`` seconds for the controller's answer (see :mod:`hpctune.wire.asktell`).
        """
        return self._client().ask(timeout)

    def tell(
        self,
        trial: AskedTrial | int,
        values: float | dict[str, float],
        *,
        step: int | None = None,
        state: str = "completed",
    ) -> None:
        """Report an asked trial's values (a number: the study metric) and end it
        (``state="running"``: an intermediate report at ``step``)."""
        self._client().tell(trial, values, step=step, state=state)

    def add_trials(self, params: list[dict[str, Any]]) -> None:
        """Enqueue hand-picked configurations (missing parameters are drawn at random)."""
        self._client().add_trials(params)


def open_study(directory: str | Path, *, write: bool = False) -> Study:
    """Open a study (safe while its controller runs).

    Args:
        directory: The study directory, or an HDF5 file written by ``hpctune export --format
            hdf5`` (read as the study was when exported; checkpoint paths point into the study
            directory it came from).
        write: Also allow :meth:`Study.ask`, :meth:`Study.tell` and :meth:`Study.add_trials`,
            which go through the study's inbox to its running controller (the journal keeps
            its one writer); reading stays a snapshot of the last commit (:meth:`Study.refresh`
            is a new one).

    Raises:
        JournalError: Not a study directory or export, or its journal cannot be read.
    """
    path = Path(directory).resolve()
    if path.is_file():
        if not is_hdf5_export(path):
            raise JournalError(
                f"{path} is a file but not a study export (`hpctune export --format "
                "hdf5`); give a study directory or an exported .h5 file"
            )
        tables = Hdf5Journal(path)
        study = Study(tables.directory, tables)
    else:
        study = Study(path)
    study._writable = write
    return study


def launch(
    spec: StudySpec | str | Path,
    *,
    directory: str | Path | None = None,
    backend: str | None = None,
    local: bool = False,
    deadline: str | None = None,
    elastic_plan: dict[str, Any] | None = None,
    out: TextIO | None = None,
    show_params: bool = False,
) -> Study | str:
    """Create a study and run it.

    Args:
        spec: A checked spec (:func:`load_spec`) or the path of a study.toml.
        directory: The study directory (default: the spec's ``[study] directory``).
        backend: The backend by name (default: Slurm where ``sbatch`` is on PATH, else
            local processes); ``local``: local processes.
        deadline: Finish by this long after the start (``"2h"``): the controller follows an
            elastic plan (give the plan made at launch as ``elastic_plan``, else it plans).
        out: Where the progress display and the summary go (default: standard output).
        show_params: Print each ended trial's parameters.

    Returns:
        The finished (or stopped) study, when its controller ran here; the controller's job
        id when the backend submitted it (the study runs on; :func:`open_study` reads it).

    Raises:
        StudySpecError: The spec is invalid, or the backend would refuse its jobs.
        Interrupted: Ctrl-C stopped the study (resume it with :func:`resume`).
    """
    if not isinstance(spec, StudySpec):
        spec = load_spec(spec, directory=directory)
    if deadline is not None:
        spec = with_deadline(spec, deadline)
    check_entry_point(spec)
    chosen, _ = choose_backend(backend, local=local)
    chosen.check(spec)
    paths = create_study(spec, elastic_plan)
    if not chosen.runs_controller_here:
        try:
            return chosen.submit_controller(paths, spec)
        except BaseException:
            shutil.rmtree(paths.root, ignore_errors=True)  # a failed launch leaves nothing
            raise
    run_here(paths, chosen, out=out, show_params=show_params)
    return open_study(paths.root)


def run_here(
    paths: StudyPaths,
    backend: Backend,
    *,
    out: TextIO | None = None,
    show_params: bool = False,
    force: bool = False,
    on_end: Callable[[Controller, str], None] | None = None,
) -> StudyState:
    """Run the study's controller in this process, with a live display and a summary at its
    end on ``out`` (standard output by default)."""
    out = sys.stdout if out is None else out

    def summary(controller: Controller, hint: str) -> None:
        for line in summary_lines(controller.state, controller.paths.root, hint):
            print(line, file=out)

    return run_local(
        paths,
        backend=backend,
        out=out,
        force=force,
        progress=LiveProgress(out, show_params=show_params),
        on_end=on_end or summary,
    )


def resume(
    directory: str | Path,
    *,
    backend: str | None = None,
    local: bool = False,
    force: bool = False,
    out: TextIO | None = None,
    show_params: bool = False,
) -> Study | str:
    """Carry on a stopped, interrupted or killed study from its journal (as ``hpctune
    resume``): in this process for a backend that runs its controller here, else submitted.

    Returns:
        The study when it ran here, the controller's job id when submitted.
    """
    paths = StudyPaths.of(Path(directory))
    prepare_study_dir(paths)
    chosen, _ = choose_backend(backend, local=local)
    if not chosen.runs_controller_here:
        spec = StudySpec.from_dict(open_study(paths.root).spec)
        chosen.check(spec)
        return chosen.submit_controller(paths, spec)
    run_here(paths, chosen, out=out, show_params=show_params, force=force)
    return open_study(paths.root)


def replay_study(
    study_dir: str | Path, trials: Sequence[int], directory: str | Path | None = None
) -> tuple[StudyPaths, list[dict[str, Any]]]:
    """Create a study that re-runs the training of ``trials`` of ``study_dir``: their lineage
    to the roots in topological order, with the recorded hyperparameters, seeds and warm
    starts (training replay); return its paths and the plan it runs. Run it with
    :func:`resume`."""
    spec, plan = replay_spec(study_dir, trials, directory)
    return create_study(spec), plan


def simulate(
    options: SimulationOptions, *, on_run: Callable[[str, int], None] | None = None
) -> Comparison:
    """Compare policies on a trace in simulated time, as ``hpctune simulate`` does.

    >>> from hpctune.simulator import SimulationOptions, SimulatorConfig     # doctest: +SKIP
    >>> options = SimulationOptions(Path("benchmarks/traces/digits.h5"),     # doctest: +SKIP
    ...     (("asha", {}), ("pop", {})), slots=4, seeds=8,
    ...     config=SimulatorConfig(queue_wait=30))
    >>> simulate(options).result.summary["asha"]["time_to_target"]           # doctest: +SKIP

    Args:
        options: The trace, the policies, slots, seeds and the simulated study's costs.
        on_run: Called with the policy's label and the seed after each run (progress).

    Returns:
        The runs and their summaries (:meth:`Comparison.to_dict` is ``simulate --json``).

    Raises:
        SimulatorError: An option, a policy or one of its options is invalid.
        TraceError: The trace file cannot be read.
    """
    from hpctune.simulator import compare  # the simulator only where it is used: start-up

    return compare(options, on_run=on_run)


__all__ = [
    "Study",
    "launch",
    "load_spec",
    "open_study",
    "replay_study",
    "resume",
    "run_here",
    "simulate",
]
