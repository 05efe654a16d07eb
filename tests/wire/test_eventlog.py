"""Event files: self-checking lines, torn and corrupt lines, cursors, concurrent writers."""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpctune.wire.eventlog import EventWriter, decode_line, encode_line, read_events

# -- strategies ------------------------------------------------------------------------------

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
_json = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=8,
)
RECORDS = st.lists(st.dictionaries(st.text(max_size=6), _json, max_size=4), max_size=12)
SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _write(path: Path, records: list[dict[str, Any]], *, fsync: bool = False) -> bytes:
    """Write ``records`` with a real EventWriter; return the file's bytes."""
    with EventWriter(path) as writer:
        for i, record in enumerate(records):
            writer.write(record, fsync=fsync and i % 2 == 0)
    return path.read_bytes()


def _line_ends(data: bytes) -> list[int]:
    """Byte offsets just after each newline."""
    return [i + 1 for i, b in enumerate(data) if b == 0x0A]


# -- unit tests -----------------------------------------------------------------------------


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "events.jsonl"
    records = [
        {"kind": "start", "host": "n1", "pid": 12},
        {"kind": "report", "step": 1, "metrics": {"acc": 0.5, "loss": float("nan")}},
        {"kind": "report", "step": 2, "metrics": {"acc": 0.75}, "note": "é ✓ \n tab\t"},
        {},
    ]
    data = _write(path, records, fsync=True)
    result = read_events(path)
    assert result.records[0] == records[0]
    assert result.records[1]["metrics"]["acc"] == 0.5
    assert result.records[1]["metrics"]["loss"] != result.records[1]["metrics"]["loss"]  # NaN
    assert result.records[2:] == records[2:]
    assert (result.offset, result.corrupt, result.pending) == (len(data), 0, 0)
    assert data.count(b"\n") == len(records)
    # reading again from the returned offset gives nothing new
    again = read_events(path, result.offset)
    assert (again.records, again.offset, again.pending) == ([], len(data), 0)


def test_line_format_is_crc_then_json() -> None:
    line = encode_line({"a": 1})
    assert line == b"%08x " % zlib.crc32(b'{"a":1}') + b'{"a":1}\n'
    assert decode_line(line[:-1]) == {"a": 1}
    # valid checksum but not an object: rejected
    payload = b"[1,2]"
    assert decode_line(b"%08x " % zlib.crc32(payload) + payload) is None
    assert decode_line(b"") is None
    assert decode_line(b"zzzzzzzz {}") is None


def test_missing_file_reads_as_empty(tmp_path: Path) -> None:
    result = read_events(tmp_path / "nope.jsonl", 17)
    assert (result.records, result.offset, result.corrupt, result.pending) == ([], 17, 0, 0)


def test_incomplete_last_line_is_pending_then_read_once_complete(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    _write(path, [{"i": 0}, {"i": 1}])
    third = encode_line({"i": 2, "text": "x" * 100})
    with open(path, "ab") as f:
        f.write(third[:40])
    first = read_events(path)
    assert first.records == [{"i": 0}, {"i": 1}]
    assert first.pending == 40
    assert first.corrupt == 0
    # nothing changes while the line stays incomplete
    still = read_events(path, first.offset)
    assert (still.records, still.offset, still.pending) == ([], first.offset, 40)
    with open(path, "ab") as f:
        f.write(third[40:])
    second = read_events(path, first.offset)
    assert second.records == [{"i": 2, "text": "x" * 100}]
    assert (second.pending, second.corrupt) == (0, 0)
    assert second.offset == path.stat().st_size


def test_corrupt_complete_line_is_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    data = bytearray(_write(path, [{"i": 0}, {"i": 1, "v": 2.5}, {"i": 2}]))
    ends = _line_ends(bytes(data))
    data[ends[0] + 12] ^= 0x01  # one bit inside the JSON of the second line
    path.write_bytes(bytes(data))
    result = read_events(path)
    assert result.records == [{"i": 0}, {"i": 2}]
    assert result.corrupt == 1
    assert result.offset == len(data)


def test_reopening_a_torn_file_ends_the_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    _write(path, [{"i": 0}, {"i": 1}])
    with open(path, "ab") as f:  # a writer died in the middle of its third line
        f.write(encode_line({"i": 2, "big": "y" * 50})[:30])
    _write(path, [{"i": 3}, {"i": 4}])
    result = read_events(path)
    assert result.records == [{"i": 0}, {"i": 1}, {"i": 3}, {"i": 4}]
    assert result.corrupt == 1
    assert result.pending == 0


def test_reopening_a_clean_file_adds_nothing(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    data = _write(path, [{"i": 0}])
    EventWriter(path).close()
    assert path.read_bytes() == data
    _write(path, [{"i": 1}])
    assert read_events(path).records == [{"i": 0}, {"i": 1}]
    assert read_events(path).corrupt == 0


def test_cursor_reader_sees_a_torn_line_completed_by_the_reopening_writer(tmp_path: Path) -> None:
    """A reader that saw a pending fragment later gets it as one corrupt line, then new records."""
    path = tmp_path / "e.jsonl"
    _write(path, [{"i": 0}])
    with open(path, "ab") as f:
        f.write(b'0badc0de {"i":')
    first = read_events(path)
    assert first.records == [{"i": 0}]
    assert first.pending > 0
    _write(path, [{"i": 1}])
    second = read_events(path, first.offset)
    assert second.records == [{"i": 1}]
    assert (second.corrupt, second.pending) == (1, 0)


# -- properties -----------------------------------------------------------------------------


@SETTINGS
@given(records=RECORDS, data=st.data())
def test_any_truncation_gives_exactly_the_complete_prefix(
    records: list[dict[str, Any]], data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        full = _write(Path(tmp) / "full.jsonl", records)
        cut = data.draw(st.integers(0, len(full)), label="cut")
        path = Path(tmp) / "cut.jsonl"
        path.write_bytes(full[:cut])
        result = read_events(path)
    complete = full[:cut].count(b"\n")
    assert result.records == records[:complete]
    assert result.corrupt == 0
    last_end = full[:cut].rfind(b"\n") + 1
    assert result.offset == last_end
    assert result.pending == cut - last_end


@SETTINGS
@given(records=RECORDS, data=st.data())
def test_chunked_reads_of_a_growing_file_give_each_record_once_in_order(
    records: list[dict[str, Any]], data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        full = _write(Path(tmp) / "full.jsonl", records)
        cuts = data.draw(
            st.lists(st.integers(0, len(full)), max_size=10).map(sorted), label="cuts"
        )
        path = Path(tmp) / "growing.jsonl"
        path.write_bytes(b"")
        seen: list[dict[str, Any]] = []
        offset = 0
        written = 0
        for cut in [*cuts, len(full)]:
            with open(path, "ab") as f:  # the writer's bytes arrive in arbitrary pieces
                f.write(full[written:cut])
            written = max(written, cut)
            result = read_events(path, offset)
            assert result.corrupt == 0
            assert result.offset >= offset
            assert result.offset + result.pending == written
            seen.extend(result.records)
            offset = result.offset
    assert seen == records
    assert offset == len(full)


@SETTINGS
@given(
    records=st.lists(
        st.dictionaries(st.text(max_size=6), _json, max_size=4), min_size=1, max_size=8
    ),
    data=st.data(),
)
def test_one_corrupted_byte_loses_at_most_its_own_line(
    records: list[dict[str, Any]], data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        full = bytearray(_write(Path(tmp) / "full.jsonl", records))
        ends = _line_ends(bytes(full))
        line = data.draw(st.integers(0, len(records) - 1), label="line")
        start = ends[line - 1] if line else 0
        # any byte of the line except its newline (a lost newline merges two lines)
        pos = data.draw(st.integers(start, ends[line] - 2), label="pos")
        new = data.draw(st.integers(0, 255).filter(lambda b: b != full[pos]), label="byte")
        full[pos] = new
        path = Path(tmp) / "bad.jsonl"
        path.write_bytes(bytes(full))
        result = read_events(path)
    others = records[:line] + records[line + 1 :]
    if result.records == records:
        # only possible when the checksum digits still parse to the same number
        assert pos < start + 8
        assert result.corrupt == 0
    else:
        assert result.records == others
        assert result.corrupt >= 1
    assert result.offset == len(full)
    assert result.pending == 0


# -- concurrent processes ---------------------------------------------------------------------

WRITERS = 8
PER_WRITER = 500


def _pad(writer: int, i: int) -> str:
    """A deterministic payload, some longer than a page, so reads can catch a write midway."""
    size = (writer * 7919 + i * 104729) % 97 * (90 if i % 11 == 0 else 3)
    return chr(0x41 + (writer + i) % 26) * size


def _writer_main(path: str, writer: int, count: int, go: Any) -> None:
    """Child process: append ``count`` records to ``path`` as fast as possible."""
    go.wait()
    with EventWriter(Path(path)) as events:
        for i in range(count):
            events.write({"w": writer, "i": i, "pad": _pad(writer, i)}, fsync=i % 50 == 0)
            if i % 100 == 0:
                time.sleep(0.001)


def test_concurrent_writer_processes_and_a_polling_reader(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    paths = [tmp_path / f"segment-{w:06d}.jsonl" for w in range(WRITERS)]
    procs = [
        ctx.Process(target=_writer_main, args=(str(p), w, PER_WRITER, go))
        for w, p in enumerate(paths)
    ]
    for proc in procs:
        proc.start()
    offsets = [0] * WRITERS
    seen: list[list[int]] = [[] for _ in range(WRITERS)]
    corrupt = 0
    polls = 0
    partial_views = 0

    def poll() -> None:
        nonlocal corrupt, polls, partial_views
        polls += 1
        for w, path in enumerate(paths):
            result = read_events(path, offsets[w])
            assert result.offset >= offsets[w]
            offsets[w] = result.offset
            corrupt += result.corrupt
            partial_views += result.pending > 0
            for record in result.records:
                assert record["w"] == w
                assert record["pad"] == _pad(w, record["i"]), "a torn record was returned"
                seen[w].append(record["i"])

    deadline = time.monotonic() + 60
    try:
        go.set()
        while any(proc.is_alive() for proc in procs):
            assert time.monotonic() < deadline, "writers did not finish"
            poll()
        poll()  # everything written by now
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
    assert [proc.exitcode for proc in procs] == [0] * WRITERS
    assert corrupt == 0
    for w in range(WRITERS):
        assert seen[w] == list(range(PER_WRITER)), f"writer {w}"
        assert offsets[w] == os.path.getsize(paths[w])
    assert polls > 1  # the reader really read while the files grew
    print(f"{polls} polls, {partial_views} views of a partial last line")
