"""Which metric rows of a trial are its curve: rows superseded by a retrain, and the prefix a
stage-tree trial shares with the trial it went on from."""

from __future__ import annotations

import numpy as np

from hpctune.journal.entities import SegmentRecord, TrialRecord


def copy_prefix(parent: TrialRecord, child: TrialRecord, step: int) -> None:
    """Make ``child``'s curve the parent's up to ``step``, then its own points after it."""
    keep = [i for i, s in enumerate(parent.curve_steps) if s <= step]
    own = [i for i, s in enumerate(child.curve_steps) if s > step]
    child.curve_steps, child.curve_values, child.curve_times = (
        [parent.curve_steps[i] for i in keep] + [child.curve_steps[i] for i in own],
        [parent.curve_values[i] for i in keep] + [child.curve_values[i] for i in own],
        [parent.curve_times[i] for i in keep] + [child.curve_times[i] for i in own],
    )


def valid_rows(
    segment: np.ndarray, step: np.ndarray, segments: dict[int, SegmentRecord]
) -> np.ndarray:
    """Return the mask of metric rows still valid.

    A row of segment ``s`` at step ``x`` is superseded when a later segment of the same trial
    started at a step below ``x`` (training was redone from an earlier checkpoint).
    """
    if not len(segment):
        return np.zeros(0, dtype=bool)
    lut = np.full(max(max(segments, default=0), int(segment.max())) + 1, np.inf)
    running_min: dict[int, float] = {}
    for seg_id in sorted(segments, reverse=True):
        seg = segments[seg_id]
        lut[seg_id] = running_min.get(seg.trial_id, np.inf)
        running_min[seg.trial_id] = min(running_min.get(seg.trial_id, np.inf), seg.start_step)
    known = segment >= 0  # rows without a segment are never superseded
    return ~known | (step <= lut[np.where(known, segment, 0)])


__all__ = ["copy_prefix", "valid_rows"]
