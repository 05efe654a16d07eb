"""The zarr journal: atomic commits, crash recovery, snapshot reads, and valid_rows."""

from __future__ import annotations

import itertools
import math
import multiprocessing as mp
import os
import random
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hpctune.errors import JournalError
from hpctune.journal.curve_rows import valid_rows
from hpctune.journal.entities import SegmentRecord
from hpctune.journal.store import ATTR, CHUNKS, TABLES, JournalReader, JournalWriter

# -- deterministic content: the rows of commit number c ----------------------------------------


@dataclass
class Rows:
    """Rows of every table, as plain Python values."""

    log: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)  # trial, segment, step, time
    values: list[dict[str, float]] = field(default_factory=list)  # one dict per metrics row
    checkpoints: list[dict[str, Any]] = field(default_factory=list)

    def extend(self, other: Rows) -> None:
        self.log += other.log
        self.metrics += other.metrics
        self.values += other.values
        self.checkpoints += other.checkpoints

    def metric_names(self) -> list[str]:
        """Metric names in order of first appearance (the journal's order)."""
        names: list[str] = []
        for row in self.values:
            names.extend(n for n in row if n not in names)
        return names


def commit_rows(c: int) -> Rows:
    """The rows commit number ``c`` adds (a pure function of ``c``)."""
    rows = Rows()
    for i in range(20 + (c * 5) % 23):
        rows.log.append(
            {
                "kind": f"k{c % 5}",
                "trial": c,
                "segment": i,
                "time": c + i / 64,
                "data": f"é{c}-{i}✓😀" * (i % 3),  # every third one empty
            }
        )
    for i in range(100 + (c * 13) % 41):
        rows.metrics.append({"trial": c, "segment": i % 7, "step": i + 1, "time": c * 1e3 + i})
        values = {"loss": c + i / 128}
        if i % 2 == 0:
            values["acc"] = i / 1000
        if c >= 8:
            values["late"] = -float(c)
        rows.values.append(values)
    if c % 3 == 0:
        rows.checkpoints.append(
            {
                "trial": c,
                "segment": c % 4,
                "step": c,
                "time": c / 3,
                "nbytes": c * 10,
                "sha256": f"{c:064x}",
                "path": f"checkpoints/trial-{c}/étape-{c}.pt",
            }
        )
    return rows


def append_rows(writer: JournalWriter, rows: Rows) -> None:
    """Buffer ``rows`` in ``writer``."""
    for row in rows.log:
        writer.append("log", **row)
    for row, values in zip(rows.metrics, rows.values, strict=True):
        writer.append_metrics(row["trial"], row["segment"], row["step"], row["time"], values)
    for row in rows.checkpoints:
        writer.append("checkpoints", **row)


_expected_cache: list[Rows] = [Rows()]


def expected_after(c: int) -> Rows:
    """All rows committed by commits 1..c."""
    while len(_expected_cache) <= c:
        total = Rows()
        total.extend(_expected_cache[-1])
        total.extend(commit_rows(len(_expected_cache)))
        _expected_cache.append(total)
    return _expected_cache[c]


def assert_view(reader: JournalReader, rows: Rows, cursors: dict[str, int] | None = None) -> None:
    """The reader's snapshot holds exactly ``rows``."""
    tables = {"log": rows.log, "metrics": rows.metrics, "checkpoints": rows.checkpoints}
    assert reader.lengths == {t: len(r) for t, r in tables.items()}
    for table, expected in tables.items():
        data = reader.table(table)
        for column, (kind, fill) in TABLES[table].items():
            got = data[column]
            assert len(got) == len(expected), (table, column)
            want = [row.get(column, fill) for row in expected]
            if kind == "f8":
                np.testing.assert_array_equal(got, np.array(want, dtype=float))
            else:
                assert got.tolist() == want, (table, column)
    names = rows.metric_names()
    assert reader.metric_names == names
    for name in [*names, "never-reported"]:
        values = np.array([v.get(name, math.nan) for v in rows.values], dtype=float)
        np.testing.assert_array_equal(reader.metric_values(name), values, err_msg=name)
    if cursors is not None:
        assert reader.cursors == cursors


def check_commit_snapshot(path: Path) -> int:
    """Open a reader and check it against the deterministic content of its commit number."""
    reader = JournalReader(path)
    c = int(reader.state["commit"])
    assert_view(reader, expected_after(c), {"commit": c} if c else {})
    return c


def run_commits(path: str, last: int, ready: Any = None) -> None:
    """Child process: resume after the store's last commit and commit up to ``last``."""
    writer = JournalWriter(Path(path))
    if ready is not None:
        ready.set()
    for c in range(int(writer.state["commit"]) + 1, last + 1):
        append_rows(writer, commit_rows(c))
        writer.commit({"commit": c})


# -- simulated crashes ----------------------------------------------------------------------------


class Crash(Exception):
    """Stands for the controller being killed."""


class _CrashingGroup:
    """A zarr group that dies after ``budget`` store operations, and always before publishing."""

    def __init__(self, group: zarr.Group, budget: int) -> None:
        self._group = group
        self._budget = budget

    def _spend(self) -> None:
        if self._budget <= 0:
            raise Crash
        self._budget -= 1

    def __getitem__(self, name: str) -> Any:
        self._spend()
        return self._group[name]

    def create_array(self, *args: Any, **kwargs: Any) -> Any:
        self._spend()
        return self._group.create_array(*args, **kwargs)

    @property
    def attrs(self) -> Any:
        raise Crash


def crash_commit(writer: JournalWriter, budget: int = 10**9) -> None:
    """Run ``writer.commit`` but kill it before it publishes (after ``budget`` operations)."""
    writer.group = _CrashingGroup(writer.group, budget)  # type: ignore[assignment]
    with pytest.raises(Crash):
        writer.commit({"crashed": 1})


# -- unit tests -------------------------------------------------------------------------------


def test_uncommitted_rows_are_invisible_until_commit(tmp_path: Path) -> None:
    path = tmp_path / "journal.zarr"
    writer = JournalWriter(path, create=True)
    assert writer.next_index("log") == 0
    assert writer.append("log", kind="a", trial=1, data="{}") == 0
    assert writer.append("log", kind="b") == 1
    assert writer.append_metrics(1, 0, 1, 0.5, {"acc": 0.1}) == 0
    assert writer.has_pending
    before = JournalReader(path)
    assert before.lengths == {"log": 0, "metrics": 0, "checkpoints": 0}
    assert before.column("log", "kind").tolist() == []
    assert before.metric_names == []
    writer.commit({"segment-000000.jsonl": 120})
    assert not writer.has_pending
    # an open reader keeps its snapshot
    assert before.lengths["log"] == 0
    assert before.column("log", "kind").tolist() == []
    assert len(before.metric_values("acc")) == 0
    after = JournalReader(path)
    assert after.lengths == {"log": 2, "metrics": 1, "checkpoints": 0}
    assert after.column("log", "kind").tolist() == ["a", "b"]
    assert after.column("log", "trial").tolist() == [1, -1]  # fill for a missing column
    assert after.column("log", "data").tolist() == ["{}", ""]
    assert after.column("log", "data", start=1).tolist() == [""]
    assert after.metric_values("acc").tolist() == [0.1]
    assert after.cursors == {"segment-000000.jsonl": 120}
    assert after.state["commit"] == 1
    # a commit with nothing pending keeps the data and the cursors unless given
    writer.commit()
    assert JournalReader(path).cursors == {"segment-000000.jsonl": 120}
    assert JournalReader(path).state["commit"] == 2


def test_append_checks_tables_and_columns(tmp_path: Path) -> None:
    writer = JournalWriter(tmp_path / "j.zarr", create=True)
    with pytest.raises(ValueError, match="append_metrics"):
        writer.append("metrics", trial=1)
    with pytest.raises(ValueError, match="unknown columns"):
        writer.append("log", kind="x", colour="red")
    assert not writer.has_pending


def test_discarded_writer_leaves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "j.zarr"
    first = JournalWriter(path, create=True)
    append_rows(first, commit_rows(1))
    first.commit({"commit": 1})
    discarded = JournalWriter(path)  # killed mid-iteration: appended, never committed
    append_rows(discarded, commit_rows(5))
    del discarded
    second = JournalWriter(path)
    append_rows(second, commit_rows(2))
    second.commit({"commit": 2})
    assert check_commit_snapshot(path) == 2


@pytest.mark.parametrize(
    ("budget", "garbage_commits"),
    [
        (0, (9, 11)),
        (3, (9, 11)),
        (8, (9, 11)),
        (10**9, (4, 6)),
        # the garbage holds metric 'late' (commits >= 8), first committed by commit 8
        (10**9, (9, 11)),
    ],
)
def test_new_writer_overwrites_the_garbage_of_a_crashed_commit(
    tmp_path: Path, budget: int, garbage_commits: tuple[int, int]
) -> None:
    path = tmp_path / "j.zarr"
    writer = JournalWriter(path, create=True)
    append_rows(writer, commit_rows(1))
    writer.commit({"commit": 1})
    crashed = JournalWriter(path)
    garbage = Rows()  # more rows than commit 2, and different ones
    for c in garbage_commits:
        garbage.extend(commit_rows(c))
    append_rows(crashed, garbage)
    crash_commit(crashed, budget)
    assert check_commit_snapshot(path) == 1  # the crash published nothing
    writer = JournalWriter(path)
    assert writer.state["commit"] == 1
    append_rows(writer, commit_rows(2))
    writer.commit({"commit": 2})
    assert check_commit_snapshot(path) == 2
    for c in range(3, 10):  # and later commits grow over the rest of the garbage
        append_rows(writer, commit_rows(c))
        writer.commit({"commit": c})
    assert check_commit_snapshot(path) == 9


def test_metric_column_of_a_crashed_commit_does_not_leak_stale_values(tmp_path: Path) -> None:
    path = tmp_path / "j.zarr"
    JournalWriter(path, create=True)
    crashed = JournalWriter(path)
    crashed.append_metrics(0, 0, 1, 0.0, {"b": 5.0})
    crashed.append_metrics(0, 0, 2, 0.0, {"b": 5.0})
    crash_commit(crashed)
    writer = JournalWriter(path)
    writer.append_metrics(0, 0, 1, 0.0, {"a": 1.0})  # a restarted controller ingests other rows
    writer.append_metrics(0, 0, 2, 0.0, {"a": 1.0})
    writer.commit()
    writer.append_metrics(0, 0, 3, 0.0, {"b": 7.0})  # metric b first committed here
    writer.commit()
    reader = JournalReader(path)
    assert reader.metric_names == ["a", "b"]
    np.testing.assert_array_equal(reader.metric_values("a"), [1.0, 1.0, math.nan])
    np.testing.assert_array_equal(reader.metric_values("b"), [math.nan, math.nan, 7.0])


def test_metric_columns_appearing_later_are_nan_filled(tmp_path: Path) -> None:
    path = tmp_path / "j.zarr"
    writer = JournalWriter(path, create=True)
    for step in range(1, 4):
        writer.append_metrics(0, 0, step, float(step), {"loss": 1.0 / step})
    writer.commit()
    # within one commit: a metric appearing at the second pending row
    writer.append_metrics(0, 0, 4, 4.0, {"loss": 0.25})
    writer.append_metrics(0, 0, 5, 5.0, {"loss": 0.2, "acc": 0.9})
    writer.append_metrics(0, 0, 6, 6.0, {"acc": 0.95, "f1": None})  # type: ignore[dict-item]
    assert writer.metric_names == ["loss", "acc", "f1"]
    writer.commit()
    reader = JournalReader(path)
    assert reader.metric_names == ["loss", "acc", "f1"]
    nan = math.nan
    np.testing.assert_array_equal(reader.metric_values("loss"), [1.0, 0.5, 1 / 3, 0.25, 0.2, nan])
    np.testing.assert_array_equal(reader.metric_values("acc"), [nan] * 4 + [0.9, 0.95])
    np.testing.assert_array_equal(reader.metric_values("f1"), [nan] * 6)
    np.testing.assert_array_equal(reader.metric_values("unknown"), [nan] * 6)
    np.testing.assert_array_equal(reader.metric_values("acc", start=4), [0.9, 0.95])
    assert reader.column("metrics", "step").tolist() == [1, 2, 3, 4, 5, 6]
    assert reader.column("metrics", "step").dtype == np.int64


STRINGS = [
    "",
    "a",
    "é",
    "日本語のテキスト",
    "emoji 😀👍🏽",
    'tab\tnewline\nquote"back\\slash',
    "a\x00b",
    " ",
    "x" * 10_000,
    "",
]


def test_string_columns_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "j.zarr"
    writer = JournalWriter(path, create=True)
    for i, text in enumerate(STRINGS):
        writer.append("log", kind=text, data=text[::-1], trial=i)
        writer.append("checkpoints", path=text, sha256=text.upper(), step=i)
    writer.commit()
    writer.append("log", kind="", data="")  # a commit of only empty strings (all fill)
    writer.commit()
    reader = JournalReader(path)
    assert reader.column("log", "kind").tolist() == [*STRINGS, ""]
    assert reader.column("log", "data").tolist() == [s[::-1] for s in STRINGS] + [""]
    assert reader.column("checkpoints", "path").tolist() == STRINGS
    assert reader.column("checkpoints", "sha256").tolist() == [s.upper() for s in STRINGS]
    assert reader.column("log", "kind").dtype == object
    assert all(isinstance(s, str) for s in reader.column("log", "kind"))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(
        st.text(st.characters(blacklist_categories=["Cs"]), max_size=40), min_size=1, max_size=30
    )
)
def test_any_text_round_trips(texts: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "j.zarr"
        writer = JournalWriter(path, create=True)
        half = len(texts) // 2
        for text in texts[:half]:
            writer.append("log", data=text)
        writer.commit()
        for text in texts[half:]:
            writer.append("log", data=text)
        writer.commit()
        assert JournalReader(path).column("log", "data").tolist() == texts


def test_newer_format_is_refused_naming_the_path(tmp_path: Path) -> None:
    path = tmp_path / "j.zarr"
    writer = JournalWriter(path, create=True)
    writer.append("log", kind="x")
    writer.commit()
    group = zarr.open_group(str(path), mode="r+")
    state: dict[str, Any] = dict(group.attrs[ATTR])  # type: ignore[arg-type]
    state["format"] = int(state["format"]) + 1
    group.attrs[ATTR] = state
    with pytest.raises(JournalError, match="newer") as info:
        JournalReader(path)
    assert str(path) in str(info.value)
    with pytest.raises(JournalError) as info:
        JournalWriter(path)
    assert str(path) in str(info.value)


def test_not_a_journal_is_refused(tmp_path: Path) -> None:
    with pytest.raises(JournalError, match="no journal"):
        JournalReader(tmp_path / "missing.zarr")
    zarr.open_group(str(tmp_path / "other.zarr"), mode="w")
    with pytest.raises(JournalError, match="not an hpctune journal") as info:
        JournalReader(tmp_path / "other.zarr")
    assert str(tmp_path / "other.zarr") in str(info.value)


def test_deterministic_commits_cross_chunk_boundaries() -> None:
    """The content the process tests use grows past the chunk length of every big table."""
    rows = expected_after(SNAPSHOT_COMMITS)
    assert len(rows.log) > CHUNKS["log"]
    assert len(rows.metrics) > CHUNKS["metrics"]


# -- another process commits while we read ---------------------------------------------------

SNAPSHOT_COMMITS = 75


def test_reader_sees_consistent_snapshots_while_a_process_commits(tmp_path: Path) -> None:
    path = tmp_path / "j.zarr"
    JournalWriter(path, create=True)
    ctx = mp.get_context("spawn")
    proc = ctx.Process(target=run_commits, args=(str(path), SNAPSHOT_COMMITS))
    proc.start()
    seen: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while proc.is_alive():
            assert time.monotonic() < deadline, "the writer process did not finish"
            seen.add(check_commit_snapshot(path))
    finally:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
    assert proc.exitcode == 0
    assert check_commit_snapshot(path) == SNAPSHOT_COMMITS
    assert len(seen - {0}) >= 5, f"too few snapshots read while writing: {sorted(seen)}"


# -- the writer process is SIGKILLed at random moments -------------------------------------------

KILLS = 5
KILL_LAST = 10_000  # the child would go on this long; it is always killed first


def test_sigkilled_writer_processes_lose_nothing_committed(tmp_path: Path) -> None:
    path = tmp_path / "j.zarr"
    JournalWriter(path, create=True)
    ctx = mp.get_context("spawn")
    rng = random.Random(20261122)
    commits = [0]
    for _ in range(KILLS):
        ready = ctx.Event()
        proc = ctx.Process(target=run_commits, args=(str(path), KILL_LAST, ready))
        proc.start()
        try:
            assert ready.wait(60), "the writer process did not start"
            deadline = time.monotonic() + 60
            while JournalReader(path).state["commit"] == commits[-1]:  # it made progress
                assert time.monotonic() < deadline, "the writer process commits nothing"
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.4))  # then dies at a random moment
        finally:
            assert proc.pid is not None
            os.kill(proc.pid, signal.SIGKILL)
            proc.join(timeout=30)
        assert proc.exitcode == -signal.SIGKILL
        commits.append(check_commit_snapshot(path))  # whatever it committed, and nothing torn
    assert all(a < b for a, b in itertools.pairwise(commits))
    # a final writer in this process finishes the job; the result is as if never killed
    final = commits[-1] + 3
    run_commits(str(path), final)
    assert check_commit_snapshot(path) == final


# -- a Python model of committed rows -----------------------------------------------------------

_names = st.sampled_from(["a", "b", "c", "é"])
_values = st.dictionaries(_names, st.floats(-1e6, 1e6, allow_nan=False), max_size=3)
_text = st.text(st.characters(blacklist_categories=["Cs"]), max_size=6)
_log_row = st.fixed_dictionaries(
    {"kind": _text, "trial": st.integers(-1, 50), "time": st.floats(0, 1e9)},
    optional={"data": _text, "segment": st.integers(-1, 50)},
)
_ckpt_row = st.fixed_dictionaries(
    {"trial": st.integers(0, 9), "step": st.integers(0, 99), "path": _text},
    optional={"nbytes": st.integers(0, 2**40), "sha256": _text},
)
_metric_row = st.tuples(st.integers(0, 9), st.integers(0, 9), st.integers(1, 99), _values)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("log"), st.lists(_log_row, min_size=1, max_size=5)),
        st.tuples(st.just("checkpoints"), st.lists(_ckpt_row, min_size=1, max_size=3)),
        st.tuples(st.just("metrics"), st.lists(_metric_row, min_size=1, max_size=6)),
        st.tuples(st.just("commit"), st.none()),
        st.tuples(st.just("discard"), st.none()),
        st.tuples(st.just("crash"), st.integers(0, 12) | st.just(10**9)),
    ),
    max_size=14,
)
MODEL_SETTINGS = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
# crash a commit that writes a new metric column, commit other rows, then that metric
BUG_EXAMPLE = [
    ("metrics", [(0, 0, 1, {"b": 5.0})]),
    ("crash", 30),
    ("metrics", [(0, 0, 1, {"a": 1.0})]),
    ("commit", None),
    ("metrics", [(0, 0, 2, {"b": 7.0})]),
    ("commit", None),
]


def _run_model(ops: list[tuple[str, Any]], *, crash_new_metrics: bool) -> None:
    """Apply ``ops`` to a real journal and to a model; compare after every commit or crash.

    With ``crash_new_metrics`` false, a crash while a not yet committed metric name is pending
    becomes a plain discard (the case of the known stale-column bug).
    """
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "j.zarr"
        writer = JournalWriter(path, create=True)
        committed, pending = Rows(), Rows()
        for op, arg in ops:
            if op == "log":
                for row in arg:
                    writer.append("log", **row)
                pending.log += arg
            elif op == "checkpoints":
                for row in arg:
                    writer.append("checkpoints", **row)
                pending.checkpoints += arg
            elif op == "metrics":
                for trial, segment, step, values in arg:
                    writer.append_metrics(trial, segment, step, float(step), values)
                    pending.metrics.append(
                        {"trial": trial, "segment": segment, "step": step, "time": float(step)}
                    )
                    pending.values.append(values)
            elif op == "commit":
                writer.commit()
                committed.extend(pending)
                pending = Rows()
            else:
                new_names = set(pending.metric_names()) - set(committed.metric_names())
                if op == "crash" and (crash_new_metrics or not new_names):
                    crash_commit(writer, arg)
                writer = JournalWriter(path)
                pending = Rows()
            if op in ("commit", "crash", "discard"):
                assert_view(JournalReader(path), committed)
        assert_view(JournalReader(path), committed)


@MODEL_SETTINGS
@given(ops=OPS)
def test_reader_view_equals_a_model_of_committed_rows(ops: list[tuple[str, Any]]) -> None:
    _run_model(ops, crash_new_metrics=False)


@MODEL_SETTINGS
@given(ops=OPS)
@example(ops=BUG_EXAMPLE)
def test_reader_view_equals_a_model_of_committed_rows_with_any_crash(
    ops: list[tuple[str, Any]],
) -> None:
    _run_model(ops, crash_new_metrics=True)


# -- valid_rows against brute force --------------------------------------------------------------


def _valid_brute_force(
    segment: list[int], step: list[int], segments: dict[int, SegmentRecord]
) -> list[bool]:
    result = []
    for seg_id, x in zip(segment, step, strict=True):
        seg = segments.get(seg_id)
        if seg is None:
            result.append(True)
            continue
        later = [
            s for s in segments.values() if s.trial_id == seg.trial_id and s.segment_id > seg_id
        ]
        result.append(all(s.start_step >= x for s in later))
    return result


@settings(max_examples=300, deadline=None)
@given(
    trials=st.lists(st.lists(st.integers(0, 30), min_size=1, max_size=5), min_size=1, max_size=5),
    data=st.data(),
)
def test_valid_rows_matches_brute_force(trials: list[list[int]], data: st.DataObject) -> None:
    # segments: trial t gets one segment per start step, ids interleaved across trials
    entries = [(t, start) for t, starts in enumerate(trials) for start in starts]
    order = data.draw(st.permutations(entries), label="order")
    gaps = data.draw(st.lists(st.integers(1, 3), min_size=len(order), max_size=len(order)))
    ids = np.cumsum(gaps).tolist()
    segments = {
        seg_id: SegmentRecord(
            segment_id=seg_id,
            trial_id=t,
            worker_id="w",
            start_step=start,
            until_step=start + 10,
            checkpoint_row=None,
            assigned_time=0.0,
        )
        for seg_id, (t, start) in zip(ids, order, strict=True)
    }
    top = max(ids) + 3  # also rows of segments the record does not know
    rows = data.draw(
        st.lists(st.tuples(st.integers(0, top), st.integers(0, 40)), max_size=60), label="rows"
    )
    segment = np.array([r[0] for r in rows], dtype=np.int64)
    step = np.array([r[1] for r in rows], dtype=np.int64)
    mask = valid_rows(segment, step, segments)
    assert mask.dtype == bool
    assert mask.shape == segment.shape
    assert mask.tolist() == _valid_brute_force(segment.tolist(), step.tolist(), segments)


def test_valid_rows_example() -> None:
    """Trial 0 ran to 10, resumed from 5 (segment 1), then from 3 (segment 3)."""

    def seg(seg_id: int, trial: int, start: int) -> SegmentRecord:
        return SegmentRecord(seg_id, trial, "w", start, start + 10, None, 0.0)

    segments = {0: seg(0, 0, 0), 1: seg(1, 0, 5), 2: seg(2, 1, 0), 3: seg(3, 0, 3)}
    segment = np.array([0, 0, 0, 0, 1, 1, 2, 2, 3])
    step = np.array([1, 3, 4, 6, 4, 6, 9, 20, 7])
    assert valid_rows(segment, step, segments).tolist() == [
        True,
        True,
        False,  # after segment 3's start at 3
        False,
        False,
        False,
        True,  # another trial
        True,
        True,
    ]
    assert valid_rows(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), {}).shape == (0,)


def _journal_with_kinds(path: Path, kinds: list[str], minor: int | None) -> JournalReader:
    """A journal whose log holds a study record then records of ``kinds``; its commit record
    says minor version ``minor`` (``None``: as written)."""
    writer = JournalWriter(path, create=True)
    writer.append("log", kind="study", data='{"state": "running"}')
    for kind in kinds:
        writer.append("log", kind=kind, data="{}")
    writer.commit()
    if minor is not None:
        group = zarr.open_group(str(path), mode="r+")
        state: dict[str, Any] = dict(group.attrs[ATTR])  # type: ignore[arg-type]
        state["minor"] = minor
        group.attrs[ATTR] = state
    return JournalReader(path)


def test_a_record_of_an_unknown_kind_is_refused_unless_the_journal_is_newer(
    tmp_path: Path,
) -> None:
    """A kind nobody registered is damage, named by its row; a journal of a newer minor version
    may hold kinds added since, skipped; one of before registration is read as it always was."""
    from hpctune.journal.reader import load_state
    from hpctune.journal.store import FORMAT_MINOR

    known = ["warning", "corrupt_lines"]
    reader = _journal_with_kinds(tmp_path / "a.zarr", [*known, "bogus"], None)
    assert reader.format_minor == FORMAT_MINOR
    with pytest.raises(JournalError, match=r"log row 3 has kind 'bogus'") as info:
        load_state(reader)
    assert str(tmp_path / "a.zarr") in str(info.value)
    newer = _journal_with_kinds(tmp_path / "b.zarr", ["bogus"], FORMAT_MINOR + 1)
    assert load_state(newer).state.value == "running"
    older = _journal_with_kinds(tmp_path / "c.zarr", ["bogus"], 0)
    assert load_state(older).state.value == "running"
    fine = _journal_with_kinds(tmp_path / "d.zarr", known, None)
    assert load_state(fine).state.value == "running"


def test_a_resumed_older_journal_takes_the_writers_minor_version(tmp_path: Path) -> None:
    from hpctune.journal.store import FORMAT_MINOR

    reader = _journal_with_kinds(tmp_path / "j.zarr", [], 0)
    assert reader.format_minor == 0
    writer = JournalWriter(tmp_path / "j.zarr")
    writer.append("log", kind="warning", data="{}")
    writer.commit()
    assert JournalReader(tmp_path / "j.zarr").format_minor == FORMAT_MINOR


def test_a_worker_record_of_an_unknown_life_is_refused_naming_its_row(tmp_path: Path) -> None:
    """A worker's life is one of WorkerLife's; another value is damage, not a new state."""
    from hpctune.journal.reader import load_state
    from hpctune.study.states import WorkerLife

    writer = JournalWriter(tmp_path / "j.zarr", create=True)
    writer.append("log", kind="study", data='{"state": "running"}')
    writer.append("log", kind="worker", data='{"worker": "w0", "event": "started", "info": {}}')
    writer.append("log", kind="worker", data='{"worker": "w0", "event": "stopping"}')
    writer.commit()
    record = load_state(JournalReader(tmp_path / "j.zarr"))
    assert record.workers["w0"].state is WorkerLife.STOPPING
    assert record.workers["w0"].state.is_alive
    writer.append("log", kind="worker", data='{"worker": "w0", "event": "vanished"}')
    writer.commit()
    with pytest.raises(JournalError, match=r"log row 3 \('worker'\) does not fit"):
        load_state(JournalReader(tmp_path / "j.zarr"))
