"""What a study's journal says of its stages: SCALE, INIT and SYNC latencies (RubberBand §5).

SCALE and INIT from the workers' submissions and first segments (:func:`study_latencies`),
SYNC where the study's rungs are known in advance (:func:`study_decisions`): what a profile
takes from a finished study, and what a running study with a deadline re-plans from.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from hpctune.elastic.experiment import ExperimentSpec, bracket_trials, experiment_from_study
from hpctune.elastic.planner import PlanResult
from hpctune.errors import HpctuneError
from hpctune.journal.entities import SegmentRecord
from hpctune.journal.state import StudyRecord
from hpctune.spec import StudySpec


def study_latencies(record: StudyRecord) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """SCALE and INIT samples of a study's workers, from its journal.

    SCALE: from a worker's submission to the start of its first process (Slurm's pending time;
    0 for local workers). INIT: from the later of that start and its first segment's
    assignment to the segment's start (the worker process importing and starting up).
    Workers that never ran or never started a segment are left out.
    """
    queue: list[float] = []
    startup: list[float] = []
    firsts: dict[str, tuple[float, float]] = {}
    for seg in record.segments.values():
        if seg.started_time is None:
            continue
        known = firsts.get(seg.worker_id)
        if known is None or seg.assigned_time < known[0]:
            firsts[seg.worker_id] = (seg.assigned_time, seg.started_time)
    for worker in record.workers.values():
        if not worker.runs:
            continue
        since = worker.runs[0].since
        if worker.submitted_time is not None:
            queue.append(max(since - worker.submitted_time, 0.0))
        if worker.worker_id in firsts:
            assigned, started = firsts[worker.worker_id]
            startup.append(max(started - max(since, assigned), 0.0))
    return tuple(queue), tuple(startup)


def study_decisions(
    record: StudyRecord,
    spec: ExperimentSpec,
    stages: Mapping[int, int | None] | None = None,
) -> tuple[float, ...]:
    """SYNC samples of a study whose stages are ``spec``, from its journal: for each stage it
    finished that a stage of the same bracket follows, the seconds from the stage's last
    segment end (the last of its trials reaching the rung) to the next stage's first segment
    start (the rung decided, the promoted trial assigned and started), at least 0 (ASHA
    promotes before its rung ends). A stage is finished when the next one has started a
    segment and none of its own runs. A bracket's last stage has no rung decision after it
    (the next bracket's trials start in free slots), so it gives no sample. ``stages``: the
    segments' stages (:func:`segment_stages`), when the caller has them already.
    """
    if stages is None:
        stages = segment_stages(record, spec)
    by_stage: dict[int | None, list[SegmentRecord]] = {}
    for segment_id, index in stages.items():
        by_stage.setdefault(index, []).append(record.segments[segment_id])
    out: list[float] = []
    for i, (stage, after) in enumerate(itertools.pairwise(spec.stages)):
        if after.bracket != stage.bracket:
            continue
        ran = by_stage.get(i, [])
        ends = [seg.ended_time for seg in ran if seg.ended_time is not None]
        starts = [seg.started_time for seg in by_stage.get(i + 1, [])]
        next_starts = [t for t in starts if t is not None]
        if not next_starts or not ends or len(ends) < len(ran):
            continue  # not finished (or never ran: a journal cut short)
        out.append(max(min(next_starts) - max(ends), 0.0))
    return tuple(out)


def segment_stages(record: StudyRecord, spec: ExperimentSpec) -> dict[int, int | None]:
    """The stage of each segment of a study (by segment id): the stage of its trial's bracket
    whose steps it starts in (``start_step <= segment start < end_step``); ``None`` for a
    trial in no bracket of ``spec``."""
    bracket_of = {t: b for b, ids in bracket_trials(spec).items() for t in ids}
    out: dict[int, int | None] = {}
    for segment_id, seg in record.segments.items():
        bracket = bracket_of.get(seg.trial_id)
        out[segment_id] = next(
            (
                i
                for i, stage in enumerate(spec.stages)
                if stage.bracket == bracket and stage.start_step <= seg.start_step < stage.end_step
            ),
            None,
        )
    return out


def study_stages(record: StudyRecord) -> ExperimentSpec | None:
    """The stages of a study, for :func:`study_decisions`: those of the plan it followed (a
    study with a deadline), else its policy's when its rungs are known in advance (``sha``,
    ``hyperband``, ``asha``), else ``None``."""

    plan = record.elastic_plan
    if plan is not None:
        return PlanResult.from_dict(plan["plan"]).spec
    try:
        return experiment_from_study(StudySpec.from_dict(record.spec))
    except HpctuneError:
        return None


__all__ = ["segment_stages", "study_decisions", "study_latencies", "study_stages"]
