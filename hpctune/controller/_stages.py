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
from typing import Any

from hpctune.analysis.best import best_checkpoint_rows
from hpctune.controller._curves import CurveFittingController
from hpctune.journal import state as st
from hpctune.journal.state import TrialRecord
from hpctune.policies import StudyView
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
from hpctune.wire.states import TrialStatus

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


class StageTreeController(CurveFittingController):
    """Admits the generator's trials to the search plan and picks the paths workers run."""

    def _setup(self, **kwargs: Any) -> None:
        super()._setup(**kwargs)
        self._trial_stages: dict[int, list[TrialStage]] = {}  # a trial's stages never change
        self._future: dict[int, dict[str, Any]] = {}  # generator index -> configuration
        spec = self.spec.stages
        self._store = StageStore(spec.store, spec.digest) if spec.store else None
        self._store_entries: dict[str, StoreEntry] = {}
        self._store_listed = -math.inf
        self._store_points: list[tuple[list[tuple[int, ConfigPiece]], int, str]] = []
        self._published: set[tuple[int, int]] = set()  # plan points known to be in the store

    @property
    def stages_enabled(self) -> bool:
        """True when the study runs as a stage tree."""
        return self.spec.stages.enabled

    def stage_seed(self) -> int:
        """The seed every trial of a stage-tree study gets (shared prefixes train alike)."""
        return stage_seed(self.spec.seed)

    def _admit_trials(self, view: StudyView) -> None:
        """Create every trial the generator has left (Hippo: every trial is a request)."""
        while self.state.generated < self.spec.num_trials:
            index = self.state.generated
            trial_id = len(self.state.trials)
            proposal = self._propose(index, view)
            params = proposal.params
            extra: dict[str, Any] = {"info": proposal.info} if proposal.info else {}
            self._log(
                st.TRIAL_CREATED,
                trial=trial_id,
                params=params,
                generator_index=index,
                seed=trial_seed(self.spec.seed, trial_id),
                **extra,
            )
            logger.info("trial %d created: %s", trial_id, params)

    def _future_configs(self) -> list[dict[str, Any]]:
        """The configurations the generator will give the trials not created yet (grid and
        random generators draw by index, so they are known now)."""
        first = self.state.generated
        if not self.generator.predictable:
            return []  # a model-based generator's proposals depend on results to come
        for index in range(first, self.spec.num_trials):
            if index not in self._future:
                self._future[index] = self.generator.suggest(index)
        return [self._future[i] for i in range(first, self.spec.num_trials)]

    def _stage_plan(self, *, full_paths: bool = False) -> SearchPlan:
        """The search plan now; with ``full_paths`` every trial to its end and the trials the
        generator will still create (what a tuner may yet ask for)."""
        return plan_from_study(
            self.state,
            self.spec.max_steps,
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
        now = self.clock.now()
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
        if checkpoint is None:
            return None
        if not checkpoint.startswith(STORE_PREFIX):
            return int(checkpoint)
        entry = self._store_entries[checkpoint[len(STORE_PREFIX) :]]
        target = self.paths.imported_checkpoint(trial.trial_id, entry.step, entry.key)
        link_or_copy(entry.file, target)
        ref = self._add_checkpoint(
            trial.trial_id,
            -1,
            entry.step,
            self.clock.now(),
            entry.nbytes,
            entry.sha256,
            self.paths.relative(target),
        )
        for step, t, value in entry.curve:
            if trial.step < int(step) <= entry.step:
                values = {self.spec.metric: float(value)}
                self.writer.append_metrics(trial.trial_id, -1, int(step), float(t), values)
                self.state.add_report(trial.trial_id, int(step), float(t), float(value), values)
        self._log(
            st.IMPORTED,
            trial=trial.trial_id,
            study=entry.study,
            source_trial=entry.trial,
            step=entry.step,
            key=entry.key,
            checkpoint_row=ref.row,
        )
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
        store = self._store
        if store is None:
            return
        for node, step, checkpoint in stage_end_points(plan):
            if checkpoint.startswith(STORE_PREFIX) or (node, step) in self._published:
                continue  # node ids are stable: trials are only ever added to the plan
            ref = self.state.checkpoints[int(checkpoint)]
            path = [[start, config_piece_to_json(c)] for start, c in plan.node_path(node)]
            trial = self.state.trials[ref.trial_id]
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
                    self.paths.root / ref.path,
                    study=self.spec.name,
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
        answered = answered_trials(self.state, plan)
        for trial_id in answered:
            path = plan.trials[trial_id]
            trial = self.state.trials[trial_id]
            row = self._resolve_checkpoint(trial, plan.nodes[path.nodes[-1]].checkpoints[path.end])
            assert row is not None
            ref = self.state.checkpoints[row]
            self._go_on_from(trial, row)
            last = min(trial.end_step or self.spec.max_steps, self.spec.max_steps)
            self._set_trial(
                trial,
                TrialStatus.COMPLETED if path.end >= last else TrialStatus.SUSPENDED,
                f"reached step {path.end} (trial {ref.trial_id}'s checkpoint)",
            )
        return bool(answered)

    def _stage_work(self, count: int, milestones: list[int]) -> tuple[list[StageWork], SearchPlan]:
        """Up to ``count`` paths for free workers, from a stage tree generated now (under a
        tuner, saving checkpoints also where trials may branch off later and at its
        ``milestones``)."""
        plan = self._stage_plan()
        if self._answer_trials(plan):
            plan = self._stage_plan()
        tree = build_stage_tree(plan)
        scheduler = Scheduler(self.spec.stages.scheduler)
        cost = profile_step_cost(self.state, plan)
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
                t
                for t in _requests_from(tree, last.id)
                if not self.state.trials[t].status.is_final
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
        if work and self.spec.policy.name != "default":  # trials a tuner may ask for later
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
        if row is None:
            return
        ref = self.state.checkpoints[row]
        same = (trial.parent_trial, trial.parent_step) == (ref.trial_id, ref.step)
        if trial.initiator is not None and ref.step == trial.parent_step:
            same = True  # a PBT child starts at its fork, whoever wrote the parent's checkpoint
        if ref.trial_id != trial.trial_id and not same:
            self._log(
                st.LINEAGE,
                trial=trial.trial_id,
                parent_trial=ref.trial_id,
                parent_step=ref.step,
                parent_checkpoint_row=ref.row,
            )

    def _collect_stage_checkpoints(
        self, plan: SearchPlan, milestones: list[int], keep: set[int] | None = None
    ) -> None:
        """Delete checkpoints nothing can resume from: not needed by a pending request
        (:func:`needed_checkpoints`) or, under a tuner, by a live or future trial asked for
        more steps later (:func:`future_checkpoints`, ``milestones``: the tuner's rungs), not
        the start of an active segment, not a trial's last (with ``keep``, PBT's
        :meth:`~hpctune.policies.Policy.needed_checkpoints`: only of the trials not ended and
        of those it names)."""
        points = needed_checkpoints(plan)
        if keep is not None:  # the results of ended trials: only those PBT names
            trials = self.state.trials
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
        if self.spec.policy.name != "default":  # tuners ask for more steps, and add trials
            ids |= future_checkpoints(self.state, self._stage_plan(full_paths=True), milestones)
        needed = {int(c) for c in ids if not c.startswith(STORE_PREFIX)}
        needed |= {
            s.checkpoint_row for s in self.state.active_segments() if s.checkpoint_row is not None
        }
        needed |= {
            t.checkpoint_row
            for t in self.state.trials.values()
            if t.checkpoint_row is not None
            and (keep is None or not t.status.is_final or t.trial_id in keep)
        }
        needed |= best_checkpoint_rows(self.state)  # the models behind the best values
        active = {s.segment_id for s in self.state.active_segments()}
        rows = [
            ref.row
            for ref in self.state.checkpoints.live()
            if ref.row not in needed and ref.segment_id not in active
        ]
        if rows:
            self._delete_checkpoints(rows)


def _requests_from(tree: StageTree, stage_id: int) -> list[int]:
    """The trials whose pending request ends at stage ``stage_id`` or one of its descendants."""
    trials: list[int] = []
    todo = [stage_id]
    while todo:
        stage = tree.stages[todo.pop()]
        trials.extend(stage.trials)
        todo.extend(stage.children)
    return trials


__all__ = ["StageTreeController", "StageWork"]
