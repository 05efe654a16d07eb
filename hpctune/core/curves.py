"""Learning-curve fits in the controller: requests at boundaries, results into the journal.

Only for policies with ``wants_predictions``. At each BOUNDARY of a trial (where
``policy.wants_fit(step)``) with at least the curve model's minimum of points and steps left, the
controller asks the fit service (:class:`~hpctune.curves.service.CurveService`) for a fit of the
trial's curve of the study metric up to that step, and goes on. Finished fits are result files;
each becomes a ``prediction`` log record (the file's path and a summary), the trial's entry of
``StudyView.predictions`` and an ``Event.prediction(trial, n)`` for the policy.

**Curves.** The fitted values are the trial's valid reports of the study metric in step order,
taken as epochs 1..n: one report per step is assumed (``step`` counts epochs from 1, every step
reports the metric). Reports without the metric are left out, so a gap shifts later points.

**Recalibration** (``[curves] recalibrate``, off by default). The policy gets each new
prediction recalibrated with the PITs of the study's earlier predictions at the values their
trials reached later (:class:`~hpctune.curves.calibration.StudyCalibration`): when a trial's new
prediction arrives, and when the trial ends, its earlier predictions lend their PITs at its
latest value. The journal and the result files keep the model's own predictions.

**Restart.** A new controller loads the prediction each trial's latest ``prediction`` record names
(with recalibration, every prediction record: the PITs are rebuilt from them)
and asks again for the fit of each unfinished trial's last boundary if no record covers it (it
was in flight); a result file already written is then read instead of refitted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from hpctune.curves.calibration import StudyCalibration
from hpctune.curves.fitter import FitOptions
from hpctune.curves.predict import CurvePrediction
from hpctune.curves.service import FitJob, FitResult
from hpctune.files import finite_or_none
from hpctune.journal import records as rec
from hpctune.journal.entities import PredictionRef, TrialRecord
from hpctune.policies import Event, EventKind
from hpctune.study.boundaries import at_boundary

if TYPE_CHECKING:
    from hpctune.core.hosts import CurvesHost


class FitService(Protocol):
    """What the core uses of a fit service: :class:`~hpctune.curves.service.CurveService` on a
    study directory, the simulator's answering from a trace."""

    folder: Path
    """Where the fits' result files are written."""
    options: FitOptions

    def request(self, job: FitJob) -> None:
        """Ask for the fit of ``job`` (never waits)."""

    def load(self, trial_id: int, n: int) -> CurvePrediction | None:
        """The prediction of a fit that finished (under an earlier controller: its result
        file), ``None`` if it cannot be read."""

    def poll(self) -> list[FitResult]:
        """The fits that finished since the last poll."""

    def close(self) -> None:
        """Stop; fits in flight are dropped."""


#: Builds the study's fit service (the controller's on its directory, the simulator's on a
#: trace) with the fit options (``None``: the spec's ``[curves]``).
ServiceFactory = Callable[[FitOptions | None], FitService]

logger = logging.getLogger(__name__)


class CurveFits:
    """The controller's learning-curve fits: asked for at boundaries, their results journaled
    and handed to the policy; never waited for.

    Args:
        controller: The controller whose trials are fitted (its spec, state, policy, journal).
        options: The fit options (``None``: the spec's ``[curves]``).
        service: The fit service: a function that builds it when the policy wants predictions
            (:meth:`start`, the controller's, which reloads the journaled predictions from their
            result files), or a service ready to use (the simulator's, which restores them
            itself); ``None``: the policy gets none.

    Attributes:
        service: The fit service, once started.
        predictions: The latest prediction of each trial, recalibrated if the study asks for it
            (the policy's view holds them).
        calibration: The study's recalibration (``None``: off).
    """

    def __init__(
        self,
        controller: CurvesHost,
        options: FitOptions | None,
        make_service: ServiceFactory | None = None,
    ) -> None:
        self.c = controller
        self.options = options
        self.make_service = make_service
        self.service: FitService | None = None
        self.predictions: dict[int, CurvePrediction] = {}
        self.calibration: StudyCalibration | None = StudyCalibration.named(
            controller.spec.curves.recalibrate
        )
        self._unsettled = False  # predictions restored but not recalibrated yet

    def start(self) -> None:
        """Start the fit service if the policy wants predictions; reload and resubmit."""
        wants = self.c.policy.traits.wants_predictions
        if not wants or self.service is not None or self.make_service is None:
            return
        service = self.service = self.make_service(self.options)
        for trial_id, refs in self.restore_refs().items():
            for ref in refs:
                loaded = service.load(trial_id, ref.n)
                if loaded is None:
                    logger.warning(
                        "trial %d: prediction file %s is unreadable", trial_id, ref.path
                    )
                    continue
                self.restore(trial_id, loaded)
        self.settle()
        self.resubmit()

    def restore_refs(self) -> dict[int, list[PredictionRef]]:
        """The journaled predictions a new controller reloads: each trial's latest, or with
        recalibration every one (in journal order)."""
        history = self.c.state.prediction_history
        if self.calibration is not None:
            return history
        return {trial_id: refs[-1:] for trial_id, refs in history.items()}

    def restore(self, trial_id: int, prediction: CurvePrediction) -> None:
        """Take back a journaled prediction (in journal order); call :meth:`settle` after."""
        if self.calibration is not None:
            self.calibration.add(trial_id, prediction)
            self._unsettled = True
        self.predictions[trial_id] = prediction

    def settle(self) -> None:
        """With recalibration: the trials that ended lend their PITs at their last value and
        drop their predictions; after a restore, the restored predictions are recalibrated."""
        calibration = self.calibration
        if calibration is None:
            return
        for trial_id in calibration.open_trials:
            trial = self.c.state.trials.get(trial_id)
            if trial is None:
                continue
            ended = trial.status.is_final or (
                bool(trial.curve_steps) and trial.curve_steps[-1] >= self.c.spec.max_steps
            )
            if ended or self._unsettled:
                self._observe(trial)
            if ended:
                calibration.close(trial_id)
        if self._unsettled:
            for trial_id in calibration.open_trials:
                self.predictions[trial_id] = calibration.apply(calibration.latest(trial_id))
            self._unsettled = False

    def _observe(self, trial: TrialRecord) -> None:
        """The trial's latest value lends its PITs to the trial's predictions before it."""
        assert self.calibration is not None
        if trial.curve_values:
            value = trial.curve_values[-1]
            self.calibration.observe(trial.trial_id, len(trial.curve_values), value)

    def resubmit(self) -> None:
        """Ask again for the fits a controller before this one asked for and did not journal:
        each unfinished trial's fit at its last boundary, unless the journal has it."""
        assert self.service is not None
        for trial in self.c.state.trials.values():
            if trial.status.is_final:
                continue
            job = self._last_boundary_job(trial)
            if job is None:
                continue
            refs = self.c.state.prediction_history.get(trial.trial_id)
            latest = refs[-1] if refs else None
            if latest is not None and (latest.n, latest.y_sha256) == (job.n, job.y_sha256):
                continue
            logger.info("trial %d: fit on %d points resubmitted", trial.trial_id, job.n)
            self.service.request(job)

    def _fit_job(self, trial: TrialRecord, step: int) -> FitJob | None:
        """The fit of ``trial``'s curve up to ``step``, or None with too few or too many points."""
        service = self.service
        assert service is not None
        values = [
            v for s, v in zip(trial.curve_steps, trial.curve_values, strict=True) if s <= step
        ]
        if len(values) < service.options.fewest_points or len(values) >= self.c.spec.max_steps:
            return None
        return FitJob.build(
            service.folder,
            trial.trial_id,
            values,
            x_max=self.c.spec.max_steps,
            bounds=self.c.spec.metric_bounds,
            mode=self.c.spec.mode,
            study_seed=self.c.spec.seed,
        )

    def _last_boundary_job(self, trial: TrialRecord) -> FitJob | None:
        for step in reversed(trial.curve_steps):
            if at_boundary(step, self.c.spec.boundary) and self.c.policy.wants_fit(step):
                return self._fit_job(trial, step)
        return None

    def update(self) -> None:
        """Ask for fits at this iteration's boundaries; journal the fits that finished."""
        service = self.service
        if service is None:
            return
        for event in self.c.pending_events:
            if event.kind is not EventKind.BOUNDARY or event.trial_id is None:
                continue
            trial = self.c.state.trials.get(event.trial_id)
            step = int(event.step or 0)
            if trial is None or trial.status.is_final or not self.c.policy.wants_fit(step):
                continue
            job = self._fit_job(trial, step)
            if job is not None:
                service.request(job)
        for result in service.poll():
            self._on_prediction(result)
        self.settle()

    def _on_prediction(self, result: FitResult) -> None:
        prediction = result.prediction
        median = None
        if not prediction.unknown and prediction.horizon:
            median = finite_or_none(float(prediction.median[-1]))
        entry = rec.PredictionEntry(
            n=result.n,
            path=self.c.paths.relative(Path(result.job.path)),
            unknown=prediction.unknown,
            median=median,
            y_sha256=result.job.y_sha256,
            seconds=result.seconds,
            backend=result.backend,
            reason=prediction.reason or None,
        )
        self.c.log(entry, trial=result.trial_id)
        if self.calibration is not None:
            trial = self.c.state.trials.get(result.trial_id)
            if trial is not None:
                self._observe(trial)
            prediction = self.calibration.add(result.trial_id, prediction)
        self.predictions[result.trial_id] = prediction
        self.c.pending_events.append(Event.prediction(result.trial_id, result.n))

    def close(self) -> None:
        """Stop the fit service (fits in flight are asked for again by the next controller)."""
        service, self.service = self.service, None
        if service is not None:
            service.close()
