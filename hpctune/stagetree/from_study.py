"""A study's search plan, rebuilt from its journal state (pure: reads a ``StudyRecord``).

The controller keeps no search plan of its own: at every decision it folds the journal's trials,
checkpoints and active segments into a fresh :class:`~hpctune.stagetree.plan.SearchPlan`, so a
restarted controller has exactly the plan the killed one had.

- Trials, in id order, each trained to its tuner's request (``request`` records: a rung of
  SHA), else to ``min(end_step, max_steps)``. A PBT child's path is its parent's up to the fork
  step, then its own configuration (:func:`forked_stages`).
- Checkpoints (not deleted), each attached to the node of its trial that trained its step; the
  first one of a (node, step) wins. Checkpoint ids are journal rows as strings.
- A request is done when a checkpoint exists at its end, or when all its trials have ended
  (completed, terminated or failed: nothing is left to train for them).
- Claims: each active segment claims, in every node of its trial's path, the steps from its
  latest checkpoint (or its start) to its ``until_step``.

:func:`profile_step_cost` is the scheduler's cost estimate: measured seconds per step of every
configuration piece trained so far (Hippo §4.3's profiling), the mean of all measured steps for a
piece not trained yet, and one second per step before anything was measured.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hpctune.journal.state import StudyRecord
from hpctune.stagetree.pieces import ConfigPiece, TrialStage, trial_stages
from hpctune.stagetree.plan import RequestStatus, SearchPlan
from hpctune.stagetree.schedulers import StepCost
from hpctune.study.states import TrialStatus


def trial_end(record: StudyRecord, trial_id: int, max_steps: int, *, full: bool = False) -> int:
    """The step a trial is trained to now: its tuner's request (a rung), else (or with
    ``full``) its ``end_step``, at most ``max_steps``."""
    trial = record.trials[trial_id]
    end = min(trial.end_step or max_steps, max_steps)
    return end if full else min(trial.request_step or end, end)


def node_at(plan: SearchPlan, trial_id: int, step: int) -> int | None:
    """The node of a trial's path that trains ``step`` (the one with ``start < step <= the
    next node's start``), ``None`` for step 0 or a step beyond the trial's end."""
    path = plan.trials[trial_id]
    if not 0 < step <= path.end:
        return None
    found = None
    for node_id in path.nodes:
        if plan.nodes[node_id].start < step:
            found = node_id
    return found


def path_ranges(plan: SearchPlan, trial_id: int) -> list[tuple[int, int, int]]:
    """``(node, start, end)`` for each node of a trial's path: the steps it trains there."""
    path = plan.trials[trial_id]
    starts = [plan.nodes[n].start for n in path.nodes]
    ends = [*starts[1:], path.end]
    return list(zip(path.nodes, starts, ends, strict=True))


def forked_stages(
    parent: Sequence[TrialStage], step: int, own: Sequence[TrialStage]
) -> list[TrialStage]:
    """The stages of a trial forked at ``step`` from a parent (PBT): the parent's up to
    ``step``, then the trial's own configuration from there."""
    before = [TrialStage(s.start, min(s.end, step), s.config) for s in parent if s.start < step]
    after = [TrialStage(max(s.start, step), s.end, s.config) for s in own if s.end > step]
    return before + after


def _stages_of(
    record: StudyRecord, trial_id: int, max_steps: int, cache: dict[int, list[TrialStage]]
) -> list[TrialStage]:
    """A trial's stages from step 0: its configuration's, or for a trial forked from another
    (PBT: it has an ``initiator`` and a parent) its parent's up to the fork step, then its own.

    A ``lineage`` record may name another parent later (an identical twin's checkpoint); the
    path up to that step is the same, so the stages kept in ``cache`` stay right.
    """
    if trial_id in cache:
        return cache[trial_id]
    trial = record.trials[trial_id]
    try:
        own = trial_stages(trial.params, max_steps)
    except ValueError as exc:
        raise ValueError(f"trial {trial_id}: {exc}") from None
    parent, step = trial.parent_trial, trial.parent_step
    if trial.initiator is not None and parent is not None and step and parent in record.trials:
        own = forked_stages(_stages_of(record, parent, max_steps, cache), step, own)
    cache[trial_id] = own
    return own


def plan_from_study(
    record: StudyRecord,
    max_steps: int,
    external: Iterable[tuple[list[tuple[int, ConfigPiece]], int, str]] = (),
    stages_cache: dict[int, list[TrialStage]] | None = None,
    *,
    full_paths: bool = False,
    future: Sequence[Mapping[str, Any]] = (),
) -> SearchPlan:
    """Fold a study's trials, checkpoints and active segments into a search plan.

    ``external`` checkpoints (``(node path, step, id)``, from the stage store of other studies)
    are attached where the plan has that path and no checkpoint of its own at that step.
    ``stages_cache`` keeps each trial's stages between calls (a trial's parameters never
    change). With ``full_paths`` every trial is planned to its end, whatever its tuner asked
    for so far (the paths it may still be trained along).

    Raises:
        ValueError: A trial's hyperparameters are not valid schedules (names the trial).
    """
    plan = SearchPlan()
    cache = {} if stages_cache is None else stages_cache
    for trial_id in sorted(record.trials):
        stages = _stages_of(record, trial_id, max_steps, cache)
        plan.add_trial(trial_id, stages, trial_end(record, trial_id, max_steps, full=full_paths))
    for offset, config in enumerate(future):
        plan.add_trial(len(record.trials) + offset, trial_stages(config, max_steps))
    for ref in record.checkpoints.live():
        if ref.trial_id not in plan.trials:
            continue
        node = node_at(plan, ref.trial_id, ref.step)
        if node is not None and ref.step not in plan.nodes[node].checkpoints:
            plan.add_checkpoint(node, ref.step, str(ref.row))
    for path, step, checkpoint_id in external:
        node = plan.find_node(path)
        if node is not None and plan.nodes[node].start < step:
            plan.nodes[node].checkpoints.setdefault(step, checkpoint_id)
            request = plan.nodes[node].requests.get(step)
            if request is not None:
                request.status = RequestStatus.DONE
    for plan_node in plan.nodes:
        for request in plan_node.requests.values():
            if all(
                t in record.trials and record.trials[t].status.is_final for t in request.trials
            ):
                request.status = RequestStatus.DONE
    for seg in record.active_segments():
        if seg.trial_id not in plan.trials:
            continue
        since = seg.start_step
        for ref in record.checkpoints.live():
            if ref.segment_id == seg.segment_id:
                since = max(since, ref.step)
        for node, start, end in path_ranges(plan, seg.trial_id):
            lo, hi = max(start, since), min(end, seg.until_step)
            if lo < hi:
                plan.claim(node, lo, hi)
    return plan


def stage_end_points(plan: SearchPlan) -> list[tuple[int, int, str]]:
    """``(node, step, checkpoint id)`` of the checkpoints at stage ends: where another node
    branches off, or where a request ends (what the stage store keeps for other studies)."""
    found = []
    for node in plan.nodes:
        ends = {plan.nodes[c].start for c in node.children} | set(node.requests)
        found += [(node.id, s, node.checkpoints[s]) for s in sorted(ends & set(node.checkpoints))]
    return found


def future_checkpoints(
    record: StudyRecord, full_plan: SearchPlan, milestones: Iterable[int] = ()
) -> set[str]:
    """Checkpoints a live or future trial may resume from when its tuner asks for more steps:
    in every node of its whole path (``full_plan``, from :func:`plan_from_study` with
    ``full_paths`` and the ``future`` trials), the latest checkpoint at or before the step
    where it leaves the node and at or before each of the tuner's ``milestones`` (rungs) in
    the node."""
    keep: set[str] = set()
    cuts = sorted(set(milestones))
    for trial_id in full_plan.trials:
        if trial_id in record.trials and record.trials[trial_id].status.is_final:
            continue
        for node_id, start, end in path_ranges(full_plan, trial_id):
            steps = sorted(s for s in full_plan.nodes[node_id].checkpoints if start < s <= end)
            for cut in [*(m for m in cuts if start < m < end), end]:
                before = [s for s in steps if s <= cut]
                if before:
                    keep.add(full_plan.nodes[node_id].checkpoints[before[-1]])
    return keep


def later_stage_ends(
    full_plan: SearchPlan, trial_id: int, lo: int, hi: int, milestones: Iterable[int] = ()
) -> set[int]:
    """Steps in ``(lo, hi)`` where a segment of ``trial_id`` should save a checkpoint for
    trials a tuner may ask for later: where the trial's whole path (``full_plan``, with
    ``full_paths`` and the ``future`` trials) branches off, and the tuner's ``milestones``."""
    path = full_plan.trials.get(trial_id)
    if path is None:
        return set()
    steps = {m for m in milestones if lo < m < hi}
    for node_id in path.nodes:
        for child in full_plan.nodes[node_id].children:
            start = full_plan.nodes[child].start
            if lo < start < hi:
                steps.add(start)
    return steps


def answered_trials(record: StudyRecord, plan: SearchPlan) -> list[int]:
    """Queued trials (not running) whose request a checkpoint answers: they need no
    training (an identical trial trained it, or their own segment ended before it could say
    so, e.g. its worker died right after the last checkpoint)."""
    busy = {s.trial_id for s in record.active_segments()}
    found = []
    for trial_id, path in sorted(plan.trials.items()):
        if record.trials[trial_id].status is not TrialStatus.QUEUED or trial_id in busy:
            continue
        if path.end in plan.nodes[path.nodes[-1]].checkpoints:
            found.append(trial_id)
    return found


def profile_step_cost(record: StudyRecord, plan: SearchPlan) -> StepCost:
    """Seconds per step by configuration piece, measured from the trials' report times.

    A step's time is the gap between two consecutive reports of one segment (the first report
    of a segment also pays the start-up, so it is left out).
    """
    seconds: dict[ConfigPiece, list[float]] = defaultdict(list)
    for seg in record.segments.values():
        trial = record.trials.get(seg.trial_id)
        if trial is None or seg.trial_id not in plan.trials:
            continue
        last = seg.end_step if seg.end_step is not None else trial.step
        points = [
            (s, t)
            for s, t in zip(trial.curve_steps, trial.curve_times, strict=True)
            if seg.start_step < s <= last
        ]
        for (s0, t0), (s1, t1) in itertools.pairwise(points):
            node = node_at(plan, seg.trial_id, s1)
            if node is not None and s1 > s0 and t1 >= t0:
                seconds[plan.nodes[node].config].append((t1 - t0) / (s1 - s0))
    return _cost_from(seconds)


def _cost_from(seconds: Mapping[ConfigPiece, list[float]]) -> StepCost:
    means = {c: sum(v) / len(v) for c, v in seconds.items() if v}
    every = [x for v in seconds.values() for x in v]
    default = sum(every) / len(every) if every else 1.0

    def cost(config: ConfigPiece) -> float:
        return means.get(config, default)

    return cost


__all__ = [
    "answered_trials",
    "future_checkpoints",
    "node_at",
    "path_ranges",
    "plan_from_study",
    "profile_step_cost",
    "stage_end_points",
    "trial_end",
]
