"""The journal's log records as typed dataclasses (hpctune/journal/records.py)."""

from __future__ import annotations

import dataclasses
import json
import types
from enum import Enum
from typing import Any, Union, get_args, get_origin, get_type_hints

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from hpctune.errors import JournalError
from hpctune.files import dumps
from hpctune.journal import records as rec
from hpctune.journal.state import LOG_KINDS, StudyRecord

_FLOATS = hs.floats(allow_nan=False, allow_infinity=False)
_JSON = hs.recursive(
    hs.none() | hs.booleans() | hs.integers(-(2**53), 2**53) | _FLOATS | hs.text(max_size=8),
    lambda inner: hs.lists(inner, max_size=3) | hs.dictionaries(hs.text(max_size=5), inner),
    max_leaves=8,
)


def _values(tp: Any) -> hs.SearchStrategy[Any]:
    """Values of a record field's type."""
    if tp is Any:
        return _JSON
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        (inner,) = [a for a in get_args(tp) if a is not type(None)]
        return hs.none() | _values(inner)
    if origin is list:
        return hs.lists(_values(get_args(tp)[0]), max_size=4)
    if origin is dict:
        return hs.dictionaries(hs.text(max_size=5), _JSON, max_size=3)
    if isinstance(tp, type) and issubclass(tp, Enum):
        return hs.sampled_from(list(tp))
    simple = {int: hs.integers(-(2**53), 2**53), float: _FLOATS, bool: hs.booleans()}
    return simple.get(tp, hs.text(max_size=10))


def _records(cls: type[rec.LogEntry]) -> hs.SearchStrategy[rec.LogEntry]:
    hints = get_type_hints(cls)
    return hs.builds(cls, **{f.name: _values(hints[f.name]) for f in dataclasses.fields(cls)})


TYPES = list(rec.RECORD_TYPES.values())
ANY_RECORD = hs.sampled_from(TYPES).flatmap(_records)
REQUIRED = [
    (cls, f.name)
    for cls in TYPES
    for f in dataclasses.fields(cls)
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
]


def test_every_registered_kind_has_its_record_type() -> None:
    assert set(LOG_KINDS) == set(rec.RECORD_TYPES)
    assert len(LOG_KINDS) == len(set(LOG_KINDS)) == 25
    for kind, cls in rec.RECORD_TYPES.items():
        assert cls.kind == kind
        assert dataclasses.is_dataclass(cls)
        assert "__slots__" in vars(cls)
        assert cls.__dataclass_params__.frozen  # type: ignore[attr-defined]


@given(ANY_RECORD)
def test_a_record_reads_back_from_its_json_data(record: rec.LogEntry) -> None:
    data = record.to_data()
    text = json.dumps(data, allow_nan=False)  # plain JSON
    assert type(record).from_data(data) == record
    assert type(record).from_data(json.loads(text)) == record
    assert json.loads(dumps(data)) == json.loads(text)


@pytest.mark.parametrize(("cls", "name"), REQUIRED, ids=[f"{c.kind}-{n}" for c, n in REQUIRED])
@settings(max_examples=10)
@given(data=hs.data())
def test_a_missing_required_key_is_named_with_its_kind(
    cls: type[rec.LogEntry], name: str, data: hs.DataObject
) -> None:
    values = data.draw(_records(cls)).to_data()
    del values[name]
    with pytest.raises(JournalError, match=f"a '{cls.kind}' record has no '{name}'"):
        cls.from_data(values)


@pytest.mark.parametrize(
    ("cls", "data", "message"),
    [
        (rec.TrialCreatedEntry, {"params": {}, "seed": "1"}, "'seed' must be an integer, not str"),
        (rec.TrialCreatedEntry, {"params": {}, "seed": True}, "'seed' must be an integer"),
        (rec.TrialCreatedEntry, {"params": [], "seed": 1}, "'params' must be an object"),
        (rec.StudyEntry, {"state": "dozing"}, "'state' must be one of"),
        (rec.CheckpointDeletedEntry, {"rows": [1, "2"]}, "'rows' item 1 must be an integer"),
        (rec.WorkerEntry, {"worker": "w0", "event": "down", "at": "x"}, "'at' must be a number"),
        (rec.SegmentStartedEntry, {"pid": None, "host": None}, "'host' must be a string, not"),
        (rec.WarningEntry, [], "data must be an object, not list"),
    ],
)
def test_a_key_of_the_wrong_type_is_named_with_its_kind(
    cls: type[rec.LogEntry], data: Any, message: str
) -> None:
    with pytest.raises(JournalError, match=f"'{cls.kind}' record"):
        cls.from_data(data)
    with pytest.raises(rec.RecordError, match=message.replace("(", r"\(")):
        cls.from_data(data)


# data written by the controller before the records were typed (one line of each shape)
WRITTEN = [
    ("study", '{"state":"created","spec":{"metric":"loss"},"reason":"launched"}'),
    ("study", '{"state":"running","reason":"controller started","fail":false}'),
    ("trial_created", '{"seed":7,"priority":0.0,"params":{"x":1},"generator_index":0}'),
    ("trial_created", '{"params":{"x":1},"generator_index":2,"seed":5,"info":{"a":1}}'),
    (
        "trial_created",
        '{"seed":1,"priority":2.5,"end_step":9,"generation":1,"initiator":0,"params":{},'
        '"parent_trial":0,"parent_step":4,"parent_checkpoint_row":3}',
    ),
    ("trial_status", '{"status":"queued","reason":"retried","retries":0,"error":""}'),
    ("segment_assigned", '{"worker":"w0000","start_step":0,"until_step":4,"checkpoint_row":null}'),
    (
        "segment_assigned",
        '{"worker":"w1","start_step":2,"until_step":8,"checkpoint_row":1,'
        '"checkpoint_steps":[4,8],"stages":[3,5]}',
    ),
    ("segment_started", '{"host":"n1","pid":12,"slurm_job_id":null,"at":3.5}'),
    ("segment_ended", '{"status":"lost","step":null,"reason":"worker w0 lost","at":9.0}'),
    ("decision", '{"step":3,"decision":"suspend","reason":"rung","priority":1.0}'),
    ("decision", '{"decision":"continue","priority":2.0,"reason":""}'),
    ("worker", '{"worker":"w0","event":"started","info":{}}'),
    ("worker", '{"worker":"w0","event":"running","since":1.5,"job":null}'),
    ("worker", '{"worker":"w0","event":"running","since":1.5,"job":"12","pid":3,"host":"n"}'),
    ("worker", '{"worker":"w0","event":"down","at":2.5}'),
    ("worker", '{"worker":"w0","event":"lost","reason":"no heartbeat"}'),
    ("command", '{"file":"a.json","command":null,"rejected":"not JSON"}'),
    ("command", '{"file":"b.json","command":{"command":"stop"}}'),
    ("policy_state", '{"state":{"rungs":[1,2]}}'),
    ("policy_delta", '{"delta":{"set":{"a":1}}}'),
    ("checkpoint_deleted", '{"rows":[1,2]}'),
    ("controller", '{"event":"started","epoch":2,"pid":0,"host":"in-memory","job":null}'),
    (
        "prediction",
        '{"n":4,"path":"curves/t.npz","unknown":true,"median":null,"y_sha256":"ab",'
        '"seconds":0.5,"backend":"pool","reason":"too few points"}',
    ),
    (
        "prediction",
        '{"n":2,"path":"c.npz","unknown":false,"median":0.5,"y_sha256":"","seconds":null,'
        '"backend":"pool"}',
    ),
    ("lineage", '{"parent_trial":0,"parent_step":4,"parent_checkpoint_row":2}'),
    ("request", '{"until_step":8}'),
    ("imported", '{"study":"s","source_trial":1,"step":4,"key":"k","checkpoint_row":0}'),
    ("warning", '{"code":"c","message":"m"}'),
    ("corrupt_lines", '{"file":"segment-000001.jsonl","line_kind":"report","rows":1,"step":3}'),
    ("submission", '{"error":"sbatch: error","workers":["w0","w1"]}'),
    ("slurm_changed", '{"slurm":{"partition":"gpu"},"changes":{"partition":"gpu"},"source":""}'),
    (
        "settings_changed",
        '{"section":"slurm","settings":{"partition":"gpu"},"changes":{"partition":["a","gpu"]},'
        '"source":"--set slurm.partition=gpu"}',
    ),
    (
        "elastic_plan",
        '{"reason":"launch","plan":{"kind":"static"},"stage_ends":[1.5,3.0],"profile":"p.json",'
        '"profile_data":{"a":1}}',
    ),
    ("elastic_stage", '{"stage":1,"workers":4}'),
    ("deadline_changed", '{"deadline":10800.0,"previous":7200.0,"source":"--deadline 3h"}'),
    ("deadline_changed", '{"deadline":3600.0,"source":""}'),
]


@pytest.mark.parametrize(("kind", "text"), WRITTEN, ids=[k for k, _ in WRITTEN])
def test_the_data_written_before_typed_records_is_written_the_same(kind: str, text: str) -> None:
    """Each record reads today's data and gives back the same keys and values."""
    data = json.loads(text)
    assert rec.RECORD_TYPES[kind].from_data(data).to_data() == data


def test_every_kind_has_a_line_of_the_written_data() -> None:
    assert {kind for kind, _ in WRITTEN} == set(LOG_KINDS)


def test_unknown_keys_are_ignored_and_unknown_kinds_are_not_applied() -> None:
    entry = rec.WarningEntry.from_data({"code": "c", "message": "m", "added_later": 1})
    assert entry == rec.WarningEntry(code="c", message="m")
    record = StudyRecord()
    record.apply("from_a_newer_minor_version", -1, -1, 0.0, {"anything": 1})
    assert record == StudyRecord()


def test_apply_refuses_a_record_of_the_wrong_shape_naming_it() -> None:
    record = StudyRecord()
    record.apply("study", -1, -1, 0.0, {"state": "running"})
    with pytest.raises(JournalError, match="a 'trial_created' record has no 'seed'"):
        record.apply("trial_created", 0, -1, 1.0, {"params": {}})
    record.apply("worker", -1, -1, 1.0, {"worker": "w0", "event": "started"})
    with pytest.raises(JournalError, match="a 'worker' record has no 'since'"):
        record.apply("worker", -1, -1, 1.0, {"worker": "w0", "event": "running"})
