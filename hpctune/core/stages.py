"""Stage-tree execution (Hippo): free workers get paths of stages, shared prefixes train once.

With ``[stages] enabled = true`` every trial of the generator is admitted at once as a request of
one search plan (the ``default`` policy), or as a tuner (SHA, Hyperband) starts and promotes
trials, a rung being the request's end. At every decision the plan is rebuilt from the journal
(:func:`~hpctune.stagetree.from_study.plan_from_study`), a stage tree is generated from it
(Algorithm 1) and the scheduler (critical path by default) gives each free worker a path of
stages. A path is run as a segment of one trial whose request ends at the path's last stage: it
starts from the checkpoint the path's first stage loads (any trial's; a ``lineage`` record then
says the trial goes on from there, and its curve up to that step is the other trial's), and it
saves a checkpoint at the end of every stage, so the branch points' children become ready while
the worker trains on. A trial whose request a checkpoint answers completes without training.
Checkpoints no pending request can resume from are deleted. With a stage store, checkpoints at
stage ends are published for later studies, and the store's checkpoints are attached to the
plan where it has their path (:mod:`hpctune.stagetree.store`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from hpctune.core.scheduling import Scheduling
from hpctune.journal import records as rec
from hpctune.journal.best import best_checkpoint_rows
from hpctune.journal.entities import TrialRecord
from hpctune.policies import ActionKind, Event, StudyView
from hpctune.stagetree.from_study import (
    answered_trials,
    future_checkpoints,
    later_stage_ends,
    plan_from_study,
    profile_step_cost,
    stage_end_points,
)
from hpctune.stagetree.pieces import (
    ConfigPiece,
    TrialStage,
    config_piece_from_json,
    config_piece_to_json,
)
from hpctune.stagetree.plan import SearchPlan
from hpctune.stagetree.schedulers import Scheduler, pick
from hpctune.stagetree.store import StageStore, StoreEntry, link_or_copy
from hpctune.stagetree.tree import StageTree, build_stage_tree, needed_checkpoints
from hpctune.study.seeding import stage_seed, trial_seed
from hpctune.study.states import StudyState, TrialStatus

if TYPE_CHECKING:
    from hpctune.core.hosts import SchedulingHost

logger = logging.getLogger(__name__)

STORE_PREFIX = "store:"  # plan checkpoint ids of the stage store's checkpoints
STORE_RELIST = 10.0  # seconds between listings of the stage store


@dataclass(frozen=True)
class StageWork:
    """A path of stages for one worker, as a segment of ``trial_id``.

    Attributes:
        trial_id: The trial the segment belongs to (its request ends at the path's end).
        start_step: The step the path starts from.
        until_step: The path's last step.
        checkpoint: The checkpoint it loads: a journal row as a string, ``store:<key>`` for
            one of the stage store, ``None`` for a fresh model.
        checkpoint_steps: The ends of the path's stages (branch points and request ends).
        stages: The stage ids (for the log).
    """

    trial_id: int
    start_step: int
    until_step: int
    checkpoint: str | None
    checkpoint_steps: tuple[int, ...]
    stages: tuple[int, ...]


class StageTreeScheduling(Scheduling):
    """Stage trees: admits the generator's trials to the search plan (or lets a tuner start,
    promote and stop them) and gives free workers paths of stages (``[stages] enabled``)."""

    def __init__(self, controller: SchedulingHost) -> None:
        super().__init__(controller)
        self._trial_stages: dict[int, list[TrialStage]] = {}  # a trial's stages never change
        self._future: dict[int, dict[str, Any]] = {}  # generator index -> configuration
        spec = controller.spec.stages
        self._store = StageStore(spec.store, spec.digest) if spec.store else None
        self._store_entries: dict[str, StoreEntry] = {}
        self._store_listed = -math.inf
        self._store_points: list[tuple[list[tuple[int, ConfigPiece]], int, str]] = []
        self._published: set[tuple[int, int]] = set()  # plan points known to be in the store

    def segment_seed(self, trial: TrialRecord) -> int:
        """The seed every trial of a stage-tree study gets (shared prefixes train alike)."""
        return stage_seed(self.c.spec.seed)

    def decision_wait(self) -> float:
        """No wait: over a stage tree a tuner judges at segment ends (requests), never
        mid-segment."""
        return 0.0

    def collect_checkpoints(self) -> None:
        """Nothing here: :meth:`fill_slots` collects the stage tree's checkpoints."""

    def fill_slots(self) -> None:
        """Stage trees: admit trials (all of them for a policy with the trait
        ``admits_every_trial``, else as the tuner asks), give free workers
        paths of the stage tree, delete checkpoints nothing needs. The study ends when nothing
        runs and nothing is requested."""
        c = self.c
        if c.policy.traits.admits_every_trial:
            if c.state.generated < c.spec.num_trials:
                self._admit_trials(c.view())
        else:
            self._ask_stage_tuner()
        idle, free_slots = c.idle_workers()
        milestones = self._tuner_milestones()
        work, plan = self._stage_work(max(free_slots, 0), milestones)
        for item in work:
            worker_id = idle.pop(0).worker_id if idle else c.pool.new_worker()
            self._assign_stages(item, worker_id)
        if work:
            plan = self._stage_plan()
        self._publish_stages(plan)
        keep = None
        if c.policy.traits.makes_configurations:  # PBT: the ended trials still parents
            keep = c.policy.needed_checkpoints(c.view())
        self._collect_stage_checkpoints(plan, milestones, keep)
        if c.state.active_segments():
            return  # the children of running paths' branch points come: keep the allocations
        if c.dirty:
            return  # trials reached their requests just now: ask the tuner again first
        for worker in idle:
            c.pool.order_exit(worker, "no work for it")
        queued = [t.trial_id for t in c.state.trials.values() if t.status is TrialStatus.QUEUED]
        if not queued:
            if c.policy.traits.makes_configurations:  # PBT names no parent now: collect
                keep = c.policy.needed_checkpoints(c.view())
                self._collect_stage_checkpoints(plan, milestones, keep)
            c.set_study(StudyState.FINISHED, "no trial of the stage tree left to run")
        elif free_slots > 0:
            c.set_study(
                StudyState.STOPPING,
                f"trials {sorted(queued)[:10]} wait for stages no worker can run; see the "
                "controller log",
                fail=True,
            )

    def _tuner_milestones(self) -> list[int]:
        """Every step the tuner may judge a trial at (its rungs; none for grid and random)."""
        c = self.c
        if c.policy.traits.admits_every_trial:
            return []
        rng = np.random.default_rng(0)  # no draw: the rungs of every bracket
        return c.policy.stage_milestones(c.view(), None, rng) or []

    def _ask_stage_tuner(self) -> None:
        """Let the tuner start, promote and stop trials over the stage tree.

        SHA and Hyperband ask for trials trained to a rung (``until_step``); a trial holds no
        worker, so they are offered a slot for every trial of the study. Tuners that judge at
        known steps (ASHA, median stopping: :meth:`Policy.stage_milestones`) get a BOUNDARY
        event for each trial that reached its milestone (continue: on to the next one;
        terminate), and as many new trials as the study has slots beyond the trials queued or
        running; so does PBT, whose children fork from their parents' checkpoints (their paths
        go on from the parent's, and identical children are one stage).
        """
        c = self.c
        judging = c.policy.traits.boundary_decisions
        if judging:
            self._judge_at_milestones()
        if judging or c.policy.traits.makes_configurations:  # one new trial per free worker
            running = sum(t.status is TrialStatus.RUNNING for t in c.state.trials.values())
            slots = max(c.spec.resources.slots - running, 0)  # less the queued: fill_slots
        else:
            slots = max(c.spec.num_trials, 1)
        view = c.view(slots)
        event = Event.slot_free(slots)
        for action in c.policy.decide(view, event, c.rng_for(event)).actions:
            if action.kind in (ActionKind.START, ActionKind.FORK):
                trial = c.actions.trial_for(action, view)
                if trial is not None:
                    until = action.until_step
                    if judging:
                        until = self._next_milestone(trial, 0, view)
                    self._request(trial, until)
            elif action.kind is ActionKind.RESUME and not judging:
                trial = c.state.trials.get(action.trial_id)  # type: ignore[arg-type]
                if trial is not None and trial.status in (
                    TrialStatus.QUEUED,
                    TrialStatus.SUSPENDED,
                ):
                    self._request(trial, action.until_step)
            elif action.kind in (ActionKind.TERMINATE, ActionKind.SUSPEND):
                c.actions.apply(action, None)
            elif action.kind is not ActionKind.RESUME:
                logger.warning("action %s cannot be carried out in a stage tree; ignored", action)

    def _next_milestone(self, trial: TrialRecord, step: int, view: StudyView) -> int | None:
        """The first step after ``step`` the tuner judges ``trial`` at (``None``: its end)."""
        c = self.c
        rng = c.rng_for(Event.boundary(trial.trial_id, step))
        milestones = c.policy.stage_milestones(view, trial.trial_id, rng) or []
        later = [m for m in milestones if m > step and m < c.spec.max_steps]
        return later[0] if later else None

    def _judge_at_milestones(self) -> None:
        """Give the tuner a BOUNDARY event for each trial suspended at its milestone."""
        c = self.c
        view = None
        for trial in list(c.state.trials.values()):
            step = trial.request_step
            if trial.status is not TrialStatus.SUSPENDED or step is None or trial.step < step:
                continue
            view = view or c.view()  # the tuner judges each trial by its own values
            event = Event.boundary(trial.trial_id, step)
            actions = c.policy.decide(view, event, c.rng_for(event)).actions
            if any(a.kind is ActionKind.TERMINATE for a in actions):
                for action in actions:
                    c.actions.apply(action, None)
            else:
                self._request(trial, self._next_milestone(trial, step, view))

    def _request(self, trial: TrialRecord, until_step: int | None) -> None:
        """Ask for ``trial`` to be trained up to ``until_step`` (``None``: to its end)."""
        c = self.c
        if until_step != trial.request_step:
            c.log(rec.RequestEntry(until_step=until_step), trial=trial.trial_id)
        if trial.status is TrialStatus.SUSPENDED:
            c.set_trial(trial, TrialStatus.QUEUED, f"requested up to step {until_step}")

    def _assign_stages(self, work: StageWork, worker_id: str) -> None:
        c = self.c
        trial = c.state.trials[work.trial_id]
        row = self._resolve_checkpoint(trial, work.checkpoint)
        self._go_on_from(trial, row)
        seg = c.actions.new_segment(
            trial,
            worker_id,
            work.start_step,
            work.until_step,
            row,
            checkpoint_steps=list(work.checkpoint_steps),
            stages=list(work.stages),
        )
        logger.info(
            "segment %d: trial %d on worker %s, stages %s, steps %d-%d",
            seg.segment_id,
            trial.trial_id,
            worker_id,
            list(work.stages),
            work.start_step,
            work.until_step,
        )

    def _admit_trials(self, view: StudyView) -> None:
        """Create every trial the generator has left (Hippo: every trial is a request)."""
        c = self.c
        while c.state.generated < c.spec.num_trials:
            index = c.state.generated
            trial_id = len(c.state.trials)
            proposal = c.propose(index, view)
            params = proposal.params
            entry = rec.TrialCreatedEntry(
                params=params,
                generator_index=index,
                seed=trial_seed(c.spec.seed, trial_id),
                info=proposal.info or None,
            )
            c.log(entry, trial=trial_id)
            logger.info("trial %d created: %s", trial_id, params)

    def _future_configs(self) -> list[dict[str, Any]]:
        """The configurations the generator will give the trials not created yet (grid and
        random generators draw by index, so they are known now)."""
        c = self.c
        first = c.state.generated
        if not c.generator.predictable:
            return []  # a model-based generator's proposals depend on results to come
        for index in range(first, c.spec.num_trials):
            if index not in self._future:
                self._future[index] = c.generator.suggest(index)
        return [self._future[i] for i in range(first, c.spec.num_trials)]

    def _stage_plan(self, *, full_paths: bool = False) -> SearchPlan:
        """The search plan now; with ``full_paths`` every trial to its end and the trials the
        generator will still create (what a tuner may yet ask for)."""
        c = self.c
        return plan_from_study(
            c.state,
            c.spec.max_steps,
            self._stored_points(),
            self._trial_stages,
            full_paths=full_paths,
            future=self._future_configs() if full_paths else (),
        )

    # -- the stage store (other studies' checkpoints) ------------------------------------------

    def _stored_points(self) -> list[tuple[list[tuple[int, ConfigPiece]], int, str]]:
        """The store's checkpoints as (node path, step, ``store:<key>``); the store is listed
        again at most every ``STORE_RELIST`` seconds."""
        if self._store is None:
            return []
        now = self.c.clock.now()
        if now - self._store_listed >= STORE_RELIST:
            self._store_listed = now
            self._store_entries = {e.key: e for e in self._store.entries()}
            self._store_points = []
            for entry in self._store_entries.values():
                try:
                    path = [(int(start), config_piece_from_json(c)) for start, c in entry.path]
                except (KeyError, TypeError, ValueError):
                    continue  # written by another hpctune version: not ours to use
                self._store_points.append((path, entry.step, f"{STORE_PREFIX}{entry.key}"))
        return self._store_points

    def _resolve_checkpoint(self, trial: TrialRecord, checkpoint: str | None) -> int | None:
        """The journal row of a plan checkpoint for ``trial``: a store checkpoint is first
        copied into the trial's folder with the study metric's curve up to its step."""
        c = self.c
        if checkpoint is None:
            return None
        if not checkpoint.startswith(STORE_PREFIX):
            return int(checkpoint)
        entry = self._store_entries[checkpoint[len(STORE_PREFIX) :]]
        target = c.paths.imported_checkpoint(trial.trial_id, entry.step, entry.key)
        link_or_copy(entry.file, target)
        ref = c.ingest.add_checkpoint(
            trial.trial_id,
            -1,
            entry.step,
            c.clock.now(),
            entry.nbytes,
            entry.sha256,
            c.paths.relative(target),
        )
        for step, t, value in entry.curve:
            if trial.step < int(step) <= entry.step:
                values = {c.spec.metric: float(value)}
                c.writer.append_metrics(trial.trial_id, -1, int(step), float(t), values)
                c.state.add_report(trial.trial_id, int(step), float(t), float(value), values)
        imported = rec.ImportedEntry(
            study=entry.study,
            source_trial=entry.trial,
            step=entry.step,
            key=entry.key,
            checkpoint_row=ref.row,
        )
        c.log(imported, trial=trial.trial_id)
        logger.info(
            "trial %d: step %d from the stage store (study %s, trial %d)",
            trial.trial_id,
            entry.step,
            entry.study,
            entry.trial,
        )
        return ref.row

    def _publish_stages(self, plan: SearchPlan) -> None:
        """Copy the checkpoints at stage ends into the stage store (once each)."""
        c = self.c
        store = self._store
        if store is None:
            return
        for node, step, checkpoint in stage_end_points(plan):
            if checkpoint.startswith(STORE_PREFIX) or (node, step) in self._published:
                continue  # node ids are stable: trials are only ever added to the plan
            ref = c.state.checkpoints[int(checkpoint)]
            path = [[start, config_piece_to_json(c)] for start, c in plan.node_path(node)]
            trial = c.state.trials[ref.trial_id]
            curve = [
                [s, t, v]
                for s, t, v in zip(
                    trial.curve_steps, trial.curve_times, trial.curve_values, strict=True
                )
                if s <= step
            ]
            try:
                store.publish(
                    path,
                    step,
                    c.paths.root / ref.path,
                    study=c.spec.name,
                    trial=ref.trial_id,
                    curve=curve,
                )
            except OSError as exc:
                logger.warning("could not publish %s to the stage store: %s", ref.path, exc)
                continue
            self._published.add((node, step))

    def _answer_trials(self, plan: SearchPlan) -> bool:
        """Complete the trials whose request a checkpoint answers (no training needed);
        return True if there were any."""
        c = self.c
        answered = answered_trials(c.state, plan)
        for trial_id in answered:
            path = plan.trials[trial_id]
            trial = c.state.trials[trial_id]
            row = self._resolve_checkpoint(trial, plan.nodes[path.nodes[-1]].checkpoints[path.end])
            assert row is not None
            ref = c.state.checkpoints[row]
            self._go_on_from(trial, row)
            last = min(trial.end_step or c.spec.max_steps, c.spec.max_steps)
            c.set_trial(
                trial,
                TrialStatus.COMPLETED if path.end >= last else TrialStatus.SUSPENDED,
                f"reached step {path.end} (trial {ref.trial_id}'s checkpoint)",
            )
        return bool(answered)

    def _stage_work(self, count: int, milestones: list[int]) -> tuple[list[StageWork], SearchPlan]:
        """Up to ``count`` paths for free workers, from a stage tree generated now (under a
        tuner, saving checkpoints also where trials may branch off later and at its
        ``milestones``)."""
        c = self.c
        plan = self._stage_plan()
        if self._answer_trials(plan):
            plan = self._stage_plan()
        tree = build_stage_tree(plan)
        scheduler = Scheduler(c.spec.stages.scheduler)
        cost = profile_step_cost(c.state, plan)
        taken: set[int] = set()
        work: list[StageWork] = []
        while len(work) < count:
            path = pick(scheduler, tree, tree.roots, cost, taken)
            if not path:
                break
            taken.update(path)
            first, last = tree.stages[path[0]], tree.stages[path[-1]]
            # the trial that trains it: one whose request ends there or further down (BFS and
            # most-children give one stage at a time, often ending at a branch point)
            live = [
                t for t in _requests_from(tree, last.id) if not c.state.trials[t].status.is_final
            ]
            if not live:  # pragma: no cover - every stage leads to a live request
                logger.warning("stage %d leads to no live trial's request; skipped", last.id)
                continue
            source = first.source
            checkpoint = (
                None if source is None else plan.nodes[source.node].checkpoints[source.step]
            )
            work.append(
                StageWork(
                    trial_id=min(live),
                    start_step=first.start,
                    until_step=last.end,
                    checkpoint=checkpoint,
                    checkpoint_steps=tuple(tree.stages[s].end for s in path),
                    stages=tuple(path),
                )
            )
        if work and not c.policy.traits.admits_every_trial:  # trials a tuner asks for later
            full = self._stage_plan(full_paths=True)
            work = [
                replace(
                    item,
                    checkpoint_steps=tuple(
                        sorted(
                            set(item.checkpoint_steps)
                            | later_stage_ends(
                                full, item.trial_id, item.start_step, item.until_step, milestones
                            )
                        )
                    ),
                )
                for item in work
            ]
        return work, plan

    def _go_on_from(self, trial: TrialRecord, row: int | None) -> None:
        """Record that ``trial`` goes on from checkpoint ``row`` if another trial wrote it (a
        ``lineage`` record; nothing if it is its own or the same lineage is recorded)."""
        c = self.c
        if row is None:
            return
        ref = c.state.checkpoints[row]
        same = (trial.parent_trial, trial.parent_step) == (ref.trial_id, ref.step)
        if trial.initiator is not None and ref.step == trial.parent_step:
            same = True  # a PBT child starts at its fork, whoever wrote the parent's checkpoint
        if ref.trial_id != trial.trial_id and not same:
            entry = rec.LineageEntry(
                parent_trial=ref.trial_id, parent_step=ref.step, parent_checkpoint_row=ref.row
            )
            c.log(entry, trial=trial.trial_id)

    def _collect_stage_checkpoints(
        self, plan: SearchPlan, milestones: list[int], keep: set[int] | None = None
    ) -> None:
        """Delete checkpoints nothing can resume from: not needed by a pending request
        (:func:`needed_checkpoints`) or, under a tuner, by a live or future trial asked for
        more steps later (:func:`future_checkpoints`, ``milestones``: the tuner's rungs), not
        the start of an active segment, not a trial's last (with ``keep``, PBT's
        :meth:`~hpctune.policies.Policy.needed_checkpoints`: only of the trials not ended and
        of those it names)."""
        c = self.c
        points = needed_checkpoints(plan)
        if keep is not None:  # the results of ended trials: only those PBT names
            trials = c.state.trials
            points = {
                p
                for p in points
                if p.step not in plan.nodes[p.node].requests
                or any(
                    not trials[t].status.is_final or t in keep
                    for t in plan.nodes[p.node].requests[p.step].trials
                )
            }
        ids = {plan.nodes[p.node].checkpoints[p.step] for p in points}
        if not c.policy.traits.admits_every_trial:  # tuners ask for more steps, add trials
            ids |= future_checkpoints(c.state, self._stage_plan(full_paths=True), milestones)
        needed = {int(c) for c in ids if not c.startswith(STORE_PREFIX)}
        needed |= {
            s.checkpoint_row for s in c.state.active_segments() if s.checkpoint_row is not None
        }
        needed |= {
            t.checkpoint_row
            for t in c.state.trials.values()
            if t.checkpoint_row is not None
            and (keep is None or not t.status.is_final or t.trial_id in keep)
        }
        needed |= best_checkpoint_rows(c.state)  # the models behind the best values
        active = {s.segment_id for s in c.state.active_segments()}
        rows = [
            ref.row
            for ref in c.state.checkpoints.live()
            if ref.row not in needed and ref.segment_id not in active
        ]
        if rows:
            c.ingest.delete_checkpoints(rows)


def _requests_from(tree: StageTree, stage_id: int) -> list[int]:
    """The trials whose pending request ends at stage ``stage_id`` or one of its descendants."""
    trials: list[int] = []
    todo = [stage_id]
    while todo:
        stage = tree.stages[todo.pop()]
        trials.extend(stage.trials)
        todo.extend(stage.children)
    return trials


__all__ = ["StageTreeScheduling", "StageWork"]
