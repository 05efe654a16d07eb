"""The checkpoint table (rows kept in columns until asked for) and the journal replay that
applies a run of checkpoint deletions at once: both against plain models of what they replace."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hpctune.api import open_study
from hpctune.controller.launch import create_study
from hpctune.errors import JournalError
from hpctune.journal.checkpoints import CheckpointRef, CheckpointTable
from hpctune.journal.epochs import current_journal, epoch_journal
from hpctune.journal.memory import MemoryJournal
from hpctune.journal.reader import load_state
from hpctune.journal.state import CHECKPOINT_DELETED, LINEAGE, TRIAL_CREATED, StudyRecord
from hpctune.journal.store import JournalWriter
from hpctune.spec import load_spec
from tests.conftest import write_study

TRIALS = 4


def _path(row: int) -> str:
    return f"checkpoints/{row}.pt"


def _columns(trials: list[int], sizes: list[int]) -> dict[str, np.ndarray]:
    n = len(trials)
    return {
        "trial": np.array(trials, dtype=np.int64),
        "segment": np.arange(n, dtype=np.int64) + 100,
        "step": np.arange(n, dtype=np.int64) + 1,
        "time": np.arange(n, dtype=np.float64) / 2,
        "nbytes": np.array(sizes, dtype=np.int64),
        "sha256": np.array([f"h{i}" for i in range(n)], dtype=object),
        "path": np.array([_path(i) for i in range(n)], dtype=object),
    }


operations = st.lists(
    st.one_of(
        st.tuples(st.just("delete"), st.lists(st.integers(-2, 14), max_size=5)),
        st.tuples(st.just("add"), st.integers(0, TRIALS - 1), st.integers(0, 10**6)),
        st.tuples(st.just("get"), st.integers(0, 14)),
    ),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(
    loaded=st.lists(st.tuples(st.integers(0, TRIALS - 1), st.integers(0, 10**6)), max_size=10),
    ops=operations,
)
@example(loaded=[(0, 1)], ops=[("get", 0), ("delete", [0])])  # a reference, then its row deleted
def test_the_table_answers_as_a_dict_of_references(
    loaded: list[tuple[int, int]], ops: list[tuple[Any, ...]]
) -> None:
    """Whatever is loaded, added, deleted and looked at, the table holds what a dict of
    references would, and its whole-table answers agree with that dict's (rows read in blocks
    of 3 here, a whole column after two blocks of it)."""
    with (
        mock.patch("hpctune.journal.checkpoints.BLOCK", 3),
        mock.patch("hpctune.journal.checkpoints.BLOCKS_BEFORE_WHOLE", 2),
    ):
        _check_against_dict(loaded, ops)


def _check_against_dict(loaded: list[tuple[int, int]], ops: list[tuple[Any, ...]]) -> None:
    columns = _columns([t for t, _ in loaded], [b for _, b in loaded])
    reads: list[str] = []

    def read(name: str, start: int, end: int) -> np.ndarray:
        reads.append(name)
        return columns[name][start:end]

    table = CheckpointTable()
    table.load(columns["trial"], read)
    model = {
        row: CheckpointRef(row, t, 100 + row, row + 1, row / 2, b, f"h{row}", _path(row))
        for row, (t, b) in enumerate(loaded)
    }
    assert reads == []  # nothing but the trial column is read before a row is asked for
    for op in ops:
        if op[0] == "delete":
            marked = table.mark_deleted(op[1])
            assert marked == {r: model[r].trial_id for r in op[1] if r in model}
            for r in op[1]:
                if r in model:
                    model[r].deleted = True
        elif op[0] == "add":
            row = len(model)
            ref = CheckpointRef(row, op[1], 0, 1, 0.0, op[2], "", f"added/{row}.pt")
            table[row] = ref
            model[row] = CheckpointRef(row, op[1], 0, 1, 0.0, op[2], "", f"added/{row}.pt")
        elif op[1] in model:
            assert table[op[1]] == model[op[1]]
        else:
            assert op[1] not in table
            with pytest.raises(KeyError):
                table[op[1]]
    assert len(table) == len(model)
    assert list(table) == sorted(model)
    assert dict(table.items()) == model
    live: dict[int, set[int]] = {}
    for row, ref in model.items():
        if not ref.deleted:
            live.setdefault(ref.trial_id, set()).add(row)
    assert table.live_rows_by_trial() == live
    assert table.latest_live() == {t: max(rows) for t, rows in live.items()}
    assert [r.row for r in table.live()] == sorted(r for rows in live.values() for r in rows)
    assert table.max_nbytes() == max((r.nbytes for r in model.values()), default=0)
    assert all(table.is_deleted(row) == ref.deleted for row, ref in model.items())
    assert all(table.step(row) == ref.step for row, ref in model.items())
    assert None not in table
    assert "0" not in table


def _reference_replay(journal: MemoryJournal) -> StudyRecord:
    """The replay as it was before runs of deletions were batched: every record alone, then
    every trial holds its last checkpoint not deleted."""
    record = StudyRecord()
    ck = journal.table("checkpoints")
    record.checkpoints.load(ck["trial"], lambda name, start, end: ck[name][start:end])
    log = journal.table("log")
    for kind, trial, segment, time, text in zip(
        *(log[c].tolist() for c in ("kind", "trial", "segment", "time", "data")), strict=True
    ):
        record.apply(kind, trial, segment, time, json.loads(text))
    for ref in sorted(record.checkpoints.values(), key=lambda r: r.row):
        if not ref.deleted and ref.trial_id in record.trials:
            record.hold_checkpoint(record.trials[ref.trial_id], ref.row)
    return record


def _log(journal: MemoryJournal, kind: str, trial: int = -1, **data: Any) -> None:
    text = json.dumps(data, separators=(",", ":"))
    journal.append("log", kind=kind, trial=trial, segment=-1, time=1.0, data=text)


journal_steps = st.lists(
    st.one_of(
        st.tuples(st.just("checkpoint"), st.integers(0, TRIALS - 1)),
        st.tuples(st.just("delete"), st.lists(st.integers(0, 30), min_size=0, max_size=3)),
        st.tuples(st.just("lineage"), st.integers(1, TRIALS - 1), st.integers(0, 30)),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(steps=journal_steps)
def test_a_run_of_deletions_replays_as_its_records_one_by_one(
    steps: list[tuple[Any, ...]],
) -> None:
    """Deletion records in runs (among stage-tree lineage records that make a trial hold
    another's checkpoint) rebuild the same holdings and deletions as applying each alone."""
    journal = MemoryJournal()
    for trial in range(TRIALS):
        _log(journal, TRIAL_CREATED, trial, params={}, seed=trial)
    steps_of = dict.fromkeys(range(TRIALS), 0)
    for step in steps:
        if step[0] == "checkpoint":
            steps_of[step[1]] += 1
            journal.append("checkpoints", trial=step[1], segment=step[1], step=steps_of[step[1]],
                           time=1.0, nbytes=1, sha256="", path=f"c{step[1]}")  # fmt: skip
        elif step[0] == "delete":
            _log(journal, CHECKPOINT_DELETED, rows=step[1])
        elif step[2] < journal.next_index("checkpoints"):  # a trial goes on from a row
            _log(journal, LINEAGE, step[1], parent_trial=0, parent_step=0,
                 parent_checkpoint_row=step[2])  # fmt: skip
    journal.commit()
    ours, theirs = load_state(journal), _reference_replay(journal)
    for trial in range(TRIALS):
        assert ours.trials[trial].checkpoint_row == theirs.trials[trial].checkpoint_row
    assert [ours.checkpoints.is_deleted(r) for r in ours.checkpoints] == [
        theirs.checkpoints.is_deleted(r) for r in theirs.checkpoints
    ]
    assert ours.live_rows() == theirs.live_rows()
    assert ours.checkpoint_changes == theirs.checkpoint_changes


def _study_with_checkpoints(tmp_path: Path) -> Path:
    """A study directory with a real zarr journal: one trial, three checkpoints, the first two
    deleted by a run of two records."""
    spec_path = write_study(tmp_path, train="def train(ctx):\n    pass\n", space={"x": [1.0]},
                            num_trials=1, max_steps=3)  # fmt: skip
    paths = create_study(load_spec(spec_path))
    writer = JournalWriter(current_journal(paths.root))
    writer.append("log", kind=TRIAL_CREATED, trial=0, segment=-1, time=1.0,
                  data=json.dumps({"params": {"x": 1.0}, "seed": 0}))  # fmt: skip
    for step in (1, 2, 3):
        writer.append("checkpoints", trial=0, segment=0, step=step, time=1.0, nbytes=10 * step,
                      sha256="", path=f"checkpoints/trial-000000/step-{step:08d}.pt")  # fmt: skip
    for row in (0, 1):
        writer.append("log", kind=CHECKPOINT_DELETED, trial=-1, segment=-1, time=1.0,
                      data=json.dumps({"rows": [row]}, separators=(",", ":")))  # fmt: skip
    writer.commit()
    return paths.root


def test_a_study_open_for_long_reads_its_checkpoints_after_its_journal_epoch_is_pruned(
    tmp_path: Path,
) -> None:
    """A later controller epoch prunes the directory the study was read from: the checkpoint
    rows asked for afterwards come from the current journal, the same rows."""
    root = _study_with_checkpoints(tmp_path)
    study = open_study(root)
    assert study.record.trials[0].checkpoint_row == 2
    read_from = current_journal(root)
    shutil.copytree(read_from, epoch_journal(root, 7))  # a later epoch's journal
    shutil.rmtree(read_from)
    ref = study.record.checkpoints[2]
    assert (ref.step, ref.nbytes, ref.path) == (3, 30, "checkpoints/trial-000000/step-00000003.pt")
    assert study.record.checkpoints[0].deleted
    assert not ref.deleted


def test_a_damaged_deletion_record_is_named_by_its_row(tmp_path: Path) -> None:
    """A deletion record that does not decode, in a run of them, is refused naming its row."""
    root = _study_with_checkpoints(tmp_path)
    writer = JournalWriter(current_journal(root))
    for text in ('{"rows":[2]}', '{"rows":["two"]}'):
        writer.append("log", kind=CHECKPOINT_DELETED, trial=-1, segment=-1, time=1.0, data=text)
    writer.commit()
    with pytest.raises(JournalError, match=r"log row 5 \('checkpoint_deleted'\)"):
        open_study(root)
