"""What a worker runs comes from the journal: an assignment file is only a notice.

The controller writes ``workers/<W>/assignment.json`` after the commit that records the segment.
A worker does not trust that file for anything it executes or loads: it looks the segment up in
the current journal (which only the controller writes), checks that the file agrees with it
(trial, worker, steps, checkpoint, hyperparameters), and takes the entry point from the study
spec in the journal and the checkpoint's path and SHA-256 from the journal's ``checkpoints``
table. A file naming a segment the journal does not hold, or disagreeing with it, is refused.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from hpctune.journal import state as st
from hpctune.journal.epochs import current_journal
from hpctune.journal.state import decode_data
from hpctune.journal.store import JournalReader
from hpctune.study.states import as_mode
from hpctune.wire.protocol import Assignment

_TAIL = 4096  # log rows searched first (a new segment is near the end)


class AssignmentRefused(Exception):
    """The assignment file disagrees with the journal (it was not written by the controller)."""


def _find(reader: JournalReader, kind: str, column: str, value: int) -> int | None:
    """The last committed log row of ``kind`` whose ``column`` (trial or segment) is ``value``."""
    n = reader.lengths["log"]
    for start in (max(n - _TAIL, 0), 0):
        kinds = reader.column("log", "kind", start)
        ids = reader.column("log", column, start)
        rows = np.flatnonzero((kinds == kind) & (ids == value))
        if len(rows):
            return start + int(rows[-1])
        if start == 0:
            break
    return None


def _data(reader: JournalReader, row: int) -> dict[str, Any]:
    return decode_data(str(reader.column("log", "data", row, row + 1)[0]))


def trusted_assignment(root: Path, claimed: Assignment, worker_id: str) -> Assignment | None:
    """Return the assignment to run, built from the journal; None if the journal does not hold
    the segment yet (its commit may not be visible from this node yet).

    Raises:
        AssignmentRefused: The journal disagrees with the file, or a commit made after the file
            was written does not hold its segment.
        JournalError: The journal cannot be read.
    """
    reader = JournalReader(current_journal(root))
    row = _find(reader, st.SEGMENT_ASSIGNED, "segment", claimed.segment_id)
    if row is None:
        if float(reader.state.get("time", 0.0)) > claimed.written:
            raise AssignmentRefused(
                f"segment {claimed.segment_id} is not in the journal, although it was "
                "committed after the assignment file was written"
            )
        return None
    seg = _data(reader, row)
    trial = int(reader.column("log", "trial", row, row + 1)[0])
    expected = {
        "trial": (trial, claimed.trial_id),
        "worker": (seg.get("worker"), worker_id),
        "start_step": (seg.get("start_step"), claimed.start_step),
        "until_step": (seg.get("until_step"), claimed.until_step),
    }
    wrong = [
        f"{name} {mine!r} (journal: {theirs!r})"
        for name, (theirs, mine) in expected.items()
        if theirs != mine
    ]
    created = _find(reader, st.TRIAL_CREATED, "trial", trial)
    params = _data(reader, created).get("params") if created is not None else None
    if params != claimed.params:
        wrong.append("params")
    if wrong:
        raise AssignmentRefused(
            f"segment {claimed.segment_id}: the assignment file disagrees with the journal on "
            + ", ".join(wrong)
        )
    spec = _data(reader, 0).get("spec") or {}
    checkpoint = sha256 = None
    ck_row = seg.get("checkpoint_row")
    if ck_row is not None:
        ck_row = int(ck_row)
        checkpoint = str(reader.column("checkpoints", "path", ck_row, ck_row + 1)[0])
        sha256 = str(reader.column("checkpoints", "sha256", ck_row, ck_row + 1)[0]) or None
    return dataclasses.replace(
        claimed,
        entry=dict(spec.get("entry") or claimed.entry),
        metric=str(spec.get("metric", claimed.metric)),
        mode=as_mode(spec.get("mode", claimed.mode)),
        max_steps=int(spec.get("max_steps", claimed.max_steps)),
        boundary=int(spec.get("boundary", claimed.boundary)),
        checkpoint=checkpoint,
        checkpoint_sha256=sha256,
    )
