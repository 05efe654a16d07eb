"""A study with ``[resources] deadline`` follows an elastic plan (RubberBand §4.4).

``hpctune launch`` plans the study (:func:`hpctune.elastic.follow.plan_study`) and journals the
plan (``elastic_plan``) with the study's creation; a study created otherwise is planned by its
controller at its first start. Every controller follows the journaled plan and does not plan
again. At every iteration it finds the stage the study is in from the trials'
steps (:class:`~hpctune.elastic.follow.StageTracker`: only the current stage's trials, and
those not seen past its end before), journals each stage it enters
(``elastic_stage``), and keeps as many workers busy as the plan gives that stage: more slots are
offered to the policy when the stage's pool is larger, and idle workers above it are told to
exit when it is smaller (a running segment is never cut short: its worker leaves when it ends).
When a stage ended later than the plan predicted by more than ``replan_drift``, the
stages after it are planned again from the measured time and cost (a new ``elastic_plan`` with
its reason, in the same commit as the stage record). ``hpctune resume --deadline`` leaves a
``deadline`` command in the inbox: the controller journals the new deadline
(``deadline_changed``) and plans the stages not yet finished to it, from the measured time,
cost and steps (a new ``elastic_plan``, same commit); a study without a plan is planned then.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hpctune.elastic.experiment import PlanningError
from hpctune.elastic.follow import (
    PLAN_REASON_LAUNCH,
    StageTracker,
    TrialProgress,
    current_stage,
    deadline_reason,
    drift_reason,
    load_study_profile,
    plan_record,
    plan_study,
    replan,
    shapes_text,
    stage_shape,
    stage_steps_left,
    stage_workers,
)
from hpctune.elastic.planner import PlanResult
from hpctune.elastic.profile import Profile
from hpctune.errors import StudySpecError
from hpctune.journal import records as rec
from hpctune.journal.entities import TrialRecord, WorkerRecord
from hpctune.journal.usage import study_usage
from hpctune.spec import with_deadline
from hpctune.study.states import StudyState, TrialStatus, WorkerLife

if TYPE_CHECKING:
    from hpctune.core.hosts import ElasticHost

logger = logging.getLogger(__name__)


class ElasticFollower:
    """The plan-following part of the controller (a study with ``[resources] deadline``).

    Args:
        controller: The controller whose worker pool follows the plan.
    """

    def __init__(self, controller: ElasticHost) -> None:
        self.c = controller
        self._elastic_result: PlanResult | None = None
        self._elastic_from = -1  # the elastic_plan records _elastic_result was read from
        self._pool_target: int | None = None  # workers to keep busy, set by follow
        self._size: int | None = None  # devices of each of them (sized plans only)
        self._stage_tracker: StageTracker | None = None  # the stage the study is in, kept up

    def plan(self) -> PlanResult | None:
        """The plan in force (journaled), or ``None`` for a study without a deadline."""
        plans = self.c.state.elastic_plans
        if not plans:
            return None
        if self._elastic_from != len(plans):
            self._elastic_result = PlanResult.from_dict(plans[-1]["plan"])
            self._elastic_from = len(plans)
        return self._elastic_result

    def _plan(self, profile: Profile) -> PlanResult:
        """The study's plan from ``profile``, billed as its backend bills (its executor)."""
        return plan_study(self.c.spec, profile=profile, billing=self.c.executor.billing_weight)

    def start(self) -> None:
        """Plan a study with a deadline once, at its first start (the journal keeps the plan
        for every later controller); a study that cannot be planned fails with the reason. A
        study launched by ``hpctune launch`` has the plan launch made journaled with it: the
        controller follows that one and does not plan again, unless the deadline changed
        (``resume --deadline``) after it and no plan was made to the new one."""
        deadline = self.c.spec.resources.deadline
        if deadline is None or self.c.state.state is not StudyState.RUNNING:
            return
        if self.c.state.elastic_plans:  # launch's, or an earlier controller's
            result = self.plan()
            if result is not None and result.deadline != deadline:  # changed, not yet planned
                self._replan_to(deadline)  # (`resume --deadline` read while stopping)
                return
            warned = any(w.code == "elastic-infeasible" for w in self.c.state.warnings)
            if result is not None and not result.feasible and not warned:
                self._warn_infeasible(result)
            return
        try:
            profile = load_study_profile(self.c.spec)
            result = plan_study(
                self.c.spec, profile=profile, billing=self.c.executor.billing_weight
            )
        except PlanningError as exc:
            self.c.set_study(StudyState.STOPPING, f"cannot plan the deadline: {exc}", fail=True)
            return
        data = plan_record(result, profile, PLAN_REASON_LAUNCH)
        self.c.log(rec.ElasticPlanEntry.from_data(data))
        logger.info(
            "elastic plan (%s): %s, predicted %.0f s, deadline %.0f s",
            result.plan.kind,
            shapes_text(result),
            result.plan.prediction.time.mean,
            result.deadline,
        )
        if not result.feasible:
            self._warn_infeasible(result)

    def _warn_infeasible(self, result: PlanResult) -> None:
        self.c.warn(
            "elastic-infeasible",
            f"no plan is predicted to meet the deadline of {result.deadline:.0f} s; "
            f"following the fastest static plan ({result.plan.prediction.time.mean:.0f} s "
            "predicted)",
        )

    def _elastic_stage(self) -> int | None:
        """The stage the study is in (journaled when it changes), or ``None`` without a plan."""
        result = self.plan()
        if result is None:
            return None
        known = self.c.state.elastic_stages
        since = known[-1][0] if known else 0
        tracker = self._stage_tracker
        if tracker is None or tracker.spec != result.spec or tracker.stage < since:
            tracker = self._stage_tracker = StageTracker(result.spec, since)
        stage = tracker.advance(self._progress_of)
        if not known or known[-1][0] != stage:
            last = result.spec.num_stages()
            workers = stage_workers(result, stage) if stage < last else 0
            self.c.log(rec.ElasticStageEntry(stage=stage, workers=workers))
            if known and 0 < stage < last:
                self._check_drift(stage - 1)
        return stage

    def _check_drift(self, ended: int) -> None:
        """Re-plan the stages after ``ended`` (journaled with the reason) when it ended later
        than the plan in force predicted by more than the setting ``replan_drift``
        (:attr:`~hpctune.core.settings.CoreSettings.replan_drift`)."""
        record = self.c.state.elastic_plan
        started = self.c.state.started_time or self.c.state.created_time
        if record is None or "profile_data" not in record:
            return
        now = self.c.clock.now()
        reason = drift_reason(record, ended, now - started, self.c.settings.replan_drift)
        if not reason:
            return
        usage = study_usage(self.c.state, now)
        cost = PlanResult.from_dict(record["plan"]).cost
        try:
            result, profile = replan(
                record, ended, now - started, cost.of(usage.device_s), self.c.state
            )
        except PlanningError as exc:
            self.c.warn("elastic-replan", f"{reason}; the re-plan failed ({exc}): plan kept")
            return
        data = plan_record(result, profile, reason, record["stage_ends"])
        self.c.log(rec.ElasticPlanEntry.from_data(data))
        logger.info(
            "elastic re-plan: %s; %s now",
            reason,
            shapes_text(result),
        )

    def change_deadline(self, command: Mapping[str, Any]) -> None:
        """Follow the deadline of an inbox ``deadline`` command (``hpctune resume --deadline``)
        from now on: journal it (``deadline_changed``) and plan the stages not yet finished to
        it from the measured elapsed time, cost and steps (an ``elastic_plan`` with the
        reason); a study without a plan is planned now. A study that cannot follow a deadline
        (its policy, a stage tree) keeps its own (warned); one that cannot be planned to it
        keeps its plan (warned) or, without one, fails with the reason as at the start."""
        deadline = float(command["deadline"])
        source = str(command.get("source", "")) or "the inbox"
        try:
            spec = with_deadline(self.c.spec, deadline)
        except StudySpecError as exc:
            self.c.warn("elastic-deadline", f"{source}: deadline not changed: {exc}")
            return
        previous = self.c.spec.resources.deadline
        self.c.log(rec.DeadlineChangedEntry(deadline=deadline, previous=previous, source=source))
        self.c.spec = spec
        if self.c.state.state is StudyState.RUNNING:
            self._replan_to(deadline)

    def _replan_to(self, deadline: float) -> None:
        """Plan the stages not yet finished to ``deadline`` (journaled)."""
        reason = deadline_reason(deadline)
        record = self.c.state.elastic_plan
        planned = record is not None and "profile_data" in record
        try:
            if record is None or "profile_data" not in record:  # none yet: the start's first
                profile = load_study_profile(self.c.spec)
                record = plan_record(
                    plan_study(
                        self.c.spec, profile=profile, billing=self.c.executor.billing_weight
                    ),
                    profile,
                    reason,
                )
            old = PlanResult.from_dict(record["plan"])
            trials = {i: self._trial_progress(t) for i, t in self.c.state.trials.items()}
            known = self.c.state.elastic_stages
            stage = current_stage(old.spec, trials, known[-1][0] if known else 0)
            if stage >= old.spec.num_stages():
                logger.info("deadline changed to %.0f s after the plan's last stage", deadline)
                return
            now = self.c.clock.now()
            elapsed = max(now - (self.c.state.started_time or self.c.state.created_time), 0.0)
            spent = old.cost.of(study_usage(self.c.state, now).device_s)
            left = stage_steps_left(old.spec, stage, trials)
            result, profile = replan(
                record, stage, elapsed, spent, self.c.state, deadline=deadline, steps_left=left
            )
        except PlanningError as exc:
            if planned:
                self.c.warn("elastic-replan", f"{reason}; the re-plan failed ({exc}): plan kept")
            else:
                self.c.set_study(
                    StudyState.STOPPING, f"cannot plan the deadline: {exc}", fail=True
                )
            return
        self.c.log(
            rec.ElasticPlanEntry.from_data(
                plan_record(result, profile, reason, record["stage_ends"])
            )
        )
        logger.info(
            "elastic re-plan: %s; %s now",
            reason,
            shapes_text(result),
        )
        if not result.feasible:
            self._warn_infeasible(result)

    def follow(self) -> None:
        """Find the stage the study is in and the workers its plan keeps busy (every
        iteration, before the scheduler offers slots)."""
        stage = self._elastic_stage()
        result = self.plan()
        self._pool_target = self._size = None
        if stage is not None and result is not None:
            self._pool_target = stage_workers(result, stage)
            self._size = self._stage_size(result, stage)

    def _stage_size(self, result: PlanResult, stage: int) -> int | None:
        """The devices of each worker of ``stage``, or ``None`` when the study's workers are
        not sized (``[resources] max_devices = 1``: the spec's workers, as without a plan)."""
        if self.c.spec.resources.max_devices <= 1:
            return None
        return stage_shape(result, stage).devices

    def worker_size(self) -> int | None:
        """The devices of each worker the current stage runs on (``None``: the spec's)."""
        return self._size

    def fits(self, worker: WorkerRecord, size: int | None = None) -> bool:
        """True if ``worker`` has the size of the current stage (or ``size``); every worker
        fits a study whose workers are not sized."""
        size = self._size if size is None else size
        return size is None or (worker.devices or 1) == size

    def _progress_of(self, trial_id: int) -> TrialProgress | None:
        """What the stage tracker needs of trial ``trial_id`` (``None``: not created yet)."""
        trial = self.c.state.trials.get(trial_id)
        return None if trial is None else self._trial_progress(trial)

    def _trial_progress(self, trial: TrialRecord) -> TrialProgress:
        """What the stage tracker needs of ``trial``."""
        running_from = None
        if trial.status is TrialStatus.RUNNING and trial.segments:
            seg = self.c.state.segments[trial.segments[-1]]
            if not seg.status.is_final:
                running_from = seg.start_step
        return TrialProgress(trial.step, running_from, trial.status.is_final)

    def pool_size(self) -> int:
        """The workers to keep busy now: the plan's for the current stage, else ``slots``."""
        if self._pool_target is None:
            return self.c.spec.resources.slots
        return self._pool_target

    def idle_to_release(self, idle: list[WorkerRecord]) -> list[WorkerRecord]:
        """The idle workers the policy has no work for that may go: all of them without a plan;
        with one, those beyond the next stage's workers less the workers still busy (the last
        to finish a stage wait for the next, as the plan's DAG holds them to the rung's SYNC)."""
        result = self.plan()
        known = self.c.state.elastic_stages
        if result is None or not known:
            return idle
        following = known[-1][0] + 1
        if following >= result.spec.num_stages():
            return idle
        busy = len([w for w in self.c.live_workers() if w.state is WorkerLife.STARTED]) - len(idle)
        keep = max(stage_workers(result, following) - busy, 0)
        size = self._stage_size(result, following)
        fitting = [w for w in idle if self.fits(w, size)]  # the next stage can use them
        return [w for w in idle if not self.fits(w, size)] + fitting[keep:]

    def shrink_pool(self) -> None:
        """Tell idle workers above the plan's pool, and idle workers of another size than the
        stage's, to exit (busy ones finish their segment first)."""
        if self._pool_target is None or self.c.state.state is not StudyState.RUNNING:
            return
        target = self._pool_target
        live = [w for w in self.c.live_workers() if w.state is WorkerLife.STARTED]
        busy = {s.worker_id for s in self.c.state.active_segments()}
        idle = [w for w in live if w.worker_id not in busy]
        for worker in idle:
            if not self.fits(worker):
                self.c.pool.order_exit(
                    worker,
                    f"the elastic plan runs this stage on workers of {self._size} device(s), "
                    f"not {worker.devices or 1}",
                )
        extra = len(live) - target - sum(not self.fits(w) for w in idle)
        for worker in idle:
            if extra <= 0:
                break
            if self.fits(worker):
                self.c.pool.order_exit(worker, f"the elastic plan holds {target} worker(s) now")
                extra -= 1
