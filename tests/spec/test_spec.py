"""Tests of hpctune.spec: loading study.toml, defaults, errors (property-based), round
trips."""

from __future__ import annotations

import copy
import json
import math
import os
import re
import tempfile
import tomllib
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpctune.errors import StudySpecError
from hpctune.policies.generators import GENERATORS
from hpctune.spec import (
    ComponentSpec,
    EntryPoint,
    ResourcesSpec,
    StudySpec,
    load_spec,
    parse_spec,
)
from hpctune.spec.parse import SECTIONS
from hpctune.spec.resources import RESOURCE_COUNTS, RESOURCE_KEYS
from hpctune.spec.study_table import STUDY_KEYS
from hpctune.study.space import parse_space

NOW = datetime(2024, 5, 6, 7, 8, 9)
TRAIN_PY = "def train(ctx):\n    return 42\n\nNOT_CALLABLE = 3\n"

# ----------------------------------------------------------------------------------------------
# A tiny TOML writer (the standard library only reads TOML)

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _key(k: str) -> str:
    return k if _BARE_KEY.fullmatch(k) else _string(k)


def _string(s: str) -> str:
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(v)


def to_toml(doc: dict[str, Any]) -> str:
    lines = []
    for section, table in doc.items():
        if not isinstance(table, dict):
            lines.append(f"{_key(section)} = {_value(table)}")
    for section, table in doc.items():
        if isinstance(table, dict):
            lines.append(f"\n[{_key(section)}]")
            lines.extend(f"{_key(k)} = {_value(v)}" for k, v in table.items())
    return "\n".join(lines) + "\n"


def base_doc() -> dict[str, Any]:
    return {
        "study": {
            "name": "demo",
            "entry_point": "train.py:train",
            "metric": "val_loss",
            "mode": "min",
            "max_steps": 20,
            "step_unit": "epoch",
            "boundary": 2,
            "num_trials": 8,
            "seed": 3,
            "fail_fast": False,
            "max_retries": 1,
            "directory": "runs/{name}",
        },
        "search_space": {
            "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
            "layers": {"type": "int", "low": 1, "high": 4},
            "bs": [32, 64],
            "opt": "adam",
            "sched": {
                "type": "schedule",
                "shape": "step",
                "base": 0.1,
                "step_size": [5, 10],
                "gamma": 0.5,
            },
            "warm": {
                "schedule": "warmup",
                "warmup_steps": 2,
                "then": {"schedule": "cosine", "base": 0.1, "total_steps": 18},
            },
        },
        "generator": {"name": "random"},
        "policy": {"name": "default"},
        "resources": {"slots": 2, "cpus_per_worker": 1, "gpus_per_worker": 0},
    }


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st_ = p.stat()
            out[str(p.relative_to(root))] = (st_.st_size, st_.st_mtime_ns)
    return out


def _write(folder: Path, doc: dict[str, Any] | str) -> Path:
    (folder / "train.py").write_text(TRAIN_PY)
    path = folder / "study.toml"
    path.write_text(doc if isinstance(doc, str) else to_toml(doc), encoding="utf-8")
    return path


def _load_in_fresh_dir(doc: dict[str, Any]) -> tuple[StudySpec | StudySpecError, Path]:
    """Load ``doc`` from a fresh folder; check that loading wrote nothing."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = _write(folder, doc)
        before = _snapshot(folder)
        result: StudySpec | StudySpecError
        try:
            result = load_spec(path, now=NOW)
        except StudySpecError as exc:
            result = exc
        assert _snapshot(folder) == before, "load_spec wrote to the study's folder"
        return result, folder.resolve()


# ----------------------------------------------------------------------------------------------
# Valid specs


def test_base_doc_loads_with_everything_resolved(tmp_path: Path) -> None:
    path = _write(tmp_path, base_doc())
    spec = load_spec(path, now=NOW)
    assert spec.source == path.resolve()
    assert spec.name == "demo"
    assert spec.directory == tmp_path.resolve() / "runs" / "demo"
    assert spec.entry == EntryPoint(
        file=tmp_path.resolve() / "train.py", module=None, function="train"
    )
    assert (spec.metric, spec.mode, spec.max_steps, spec.boundary) == ("val_loss", "min", 20, 2)
    assert (spec.num_trials, spec.seed, spec.fail_fast, spec.max_retries) == (8, 3, False, 1)
    assert spec.generator == ComponentSpec("random", {})
    assert spec.policy == ComponentSpec("default", {})
    assert spec.resources == ResourcesSpec(2, 1, 0)
    assert list(spec.space.params) == list(base_doc()["search_space"])


def test_defaults(tmp_path: Path) -> None:
    doc = {
        "study": {
            "name": "d",
            "entry_point": "train.py:train",
            "metric": "acc",
            "mode": "max",
            "max_steps": 5,
            "num_trials": 3,
        },
        "search_space": {"lr": [0.1, 0.01]},
    }
    spec = load_spec(_write(tmp_path, doc), now=NOW)
    assert spec.step_unit == "epoch"
    assert spec.boundary == 1
    assert spec.seed == 0
    assert spec.fail_fast is False
    assert spec.max_retries == 2
    assert spec.generator == ComponentSpec("random", {})
    assert spec.policy == ComponentSpec("default", {})
    assert spec.resources == ResourcesSpec(slots=2, cpus_per_worker=1, gpus_per_worker=0)
    assert spec.directory == tmp_path.resolve() / "runs" / "d-20240506-070809"
    assert spec.curves.model == "amortised"
    assert spec.curves.recalibrate == "none"


def test_directory_override_is_relative_to_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path, base_doc())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    spec = load_spec(path, directory="out/{name}-{timestamp}", now=NOW)
    assert spec.directory == elsewhere.resolve() / "out" / "demo-20240506-070809"
    spec = load_spec(path, directory=tmp_path / "abs", now=NOW)
    assert spec.directory == tmp_path.resolve() / "abs"
    # a relative study.toml path is made absolute, against the current directory
    spec = load_spec(Path("..") / "study.toml", now=NOW)
    assert spec.source == path.resolve()


def test_absolute_directory_and_unknown_placeholder(tmp_path: Path) -> None:
    doc = base_doc()
    doc["study"]["directory"] = str(tmp_path / "x" / "{name}")
    assert load_spec(_write(tmp_path, doc)).directory == tmp_path.resolve() / "x" / "demo"
    doc["study"]["directory"] = "runs/{date}"
    with pytest.raises(StudySpecError, match=r"unknown placeholder \{date\}") as info:
        load_spec(_write(tmp_path, doc))
    assert info.value.field == "study.directory"


def test_grid_generator_defaults_num_trials_to_grid_size(tmp_path: Path) -> None:
    doc = base_doc()
    del doc["study"]["num_trials"]
    doc["generator"] = {"name": "grid", "shuffle": True}
    doc["search_space"] = {
        "a": [1, 2, 3],
        "lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True, "grid_points": 2},
    }
    spec = load_spec(_write(tmp_path, doc))
    assert spec.num_trials == 6
    assert spec.generator == ComponentSpec("grid", {"shuffle": True})
    doc["study"]["num_trials"] = 4
    assert load_spec(_write(tmp_path, doc)).num_trials == 4
    doc["study"]["num_trials"] = 7
    with pytest.raises(StudySpecError) as info:
        load_spec(_write(tmp_path, doc))
    assert info.value.field == "study.num_trials"
    assert "must be between 1 and the grid size (6), but got 7" in info.value.message


def test_module_entry_point(tmp_path: Path) -> None:
    doc = base_doc()
    doc["study"]["entry_point"] = "json.decoder:JSONDecoder.decode"
    spec = load_spec(_write(tmp_path, doc))
    assert spec.entry == EntryPoint(None, "json.decoder", "JSONDecoder.decode")
    assert spec.entry.describe() == "json.decoder:JSONDecoder.decode"
    import json.decoder

    assert spec.entry.load() is json.decoder.JSONDecoder.decode


def test_entry_point_load_from_file(tmp_path: Path) -> None:
    spec = load_spec(_write(tmp_path, base_doc()))
    assert spec.entry.describe() == f"{tmp_path.resolve()}/train.py:train"
    fn = spec.entry.load()
    assert fn(None) == 42
    assert spec.entry.load() is fn


def test_entry_points_with_the_same_file_name_stay_apart(tmp_path: Path) -> None:
    fns = []
    for i in range(2):
        folder = tmp_path / f"d{i}"
        folder.mkdir()
        (folder / "train.py").write_text(f"def train(ctx):\n    return {i}\n")
        fns.append(EntryPoint(folder / "train.py", None, "train").load())
    assert [f(None) for f in fns] == [0, 1]


@pytest.mark.parametrize(
    ("entry", "text"),
    [
        (lambda d: EntryPoint(d / "train.py", None, "missing"), "callables defined there: train"),
        (lambda d: EntryPoint(d / "train.py", None, "NOT_CALLABLE"), "must be a function"),
        (lambda d: EntryPoint(d / "gone.py", None, "train"), "does not exist"),
        (lambda d: EntryPoint(d / "broken.py", None, "train"), "ZeroDivisionError"),
        (lambda d: EntryPoint(None, "no_such_module_xyz", "train"), "cannot import module"),
    ],
)
def test_entry_point_load_errors(
    tmp_path: Path, entry: Callable[[Path], EntryPoint], text: str
) -> None:
    _write(tmp_path, base_doc())
    (tmp_path / "broken.py").write_text("1 / 0\n")
    with pytest.raises(StudySpecError, match=text) as info:
        entry(tmp_path).load()
    assert info.value.field == "study.entry_point"


# ----------------------------------------------------------------------------------------------
# File-level errors


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(StudySpecError, match="does not exist") as info:
        load_spec(tmp_path / "nope.toml")
    assert info.value.path == tmp_path / "nope.toml"
    assert str(tmp_path / "nope.toml") in str(info.value)
    with pytest.raises(StudySpecError, match="not a file"):
        load_spec(tmp_path)


def test_toml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    text = to_toml(base_doc()).replace("max_steps = 20", "max_steps == 20")
    path = _write(tmp_path, text)
    line = text.splitlines().index("max_steps == 20") + 1
    with pytest.raises(StudySpecError) as info:
        load_spec(path)
    assert info.value.field == ""
    assert f"line {line}" in str(info.value)
    assert str(path) in str(info.value)


def test_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "study.toml"
    path.write_bytes(b'[study]\nname = "\xff"\n')
    with pytest.raises(StudySpecError, match="UTF-8"):
        load_spec(path)


# ----------------------------------------------------------------------------------------------
# Messages


@pytest.mark.parametrize(
    ("mutate", "field", "message"),
    [
        (
            lambda d: d["study"].update(boundary=0),
            "study.boundary",
            "`study.boundary` must be between 1 and max_steps (20), but got 0",
        ),
        (
            lambda d: d["study"].update(max_steps="20"),
            "study.max_steps",
            "must be an integer >= 1, but got '20' (str); write it without quotes",
        ),
        (lambda d: d.update(polcy={}), "polcy", "did you mean [policy]?"),
        (lambda d: d["study"].update(max_step=3), "study.max_step", "did you mean `max_steps`?"),
        (lambda d: d["study"].pop("mode"), "study.mode", '"max" or "min"'),
        (lambda d: d["policy"].update(eta=3), "policy.eta", "unknown option"),
        (lambda d: d["generator"].update(name="smac"), "generator.name", "known generators"),
        (lambda d: d["policy"].update(name="nope"), "policy.name", "known policies: default"),
        (lambda d: d.update(study=3), "study", "must be a table"),
        (lambda d: d.pop("search_space"), "search_space", "is required"),
        (lambda d: d["study"].pop("num_trials"), "study.num_trials", "num_trials = 32"),
        (
            lambda d: d["generator"].update(name="grid"),
            "search_space.lr",
            "add `grid_points = N`",
        ),
        (
            lambda d: d["study"].update(entry_point="train.py"),
            "study.entry_point",
            '"train.py:train"',
        ),
        (
            lambda d: d["study"].update(entry_point="sub/other.py:train"),
            "study.entry_point",
            "relative to the study.toml's folder",
        ),
        (lambda d: d.update(stages={"enable": True}), "stages.enable", "`enabled`?"),
        (
            lambda d: d.update(curves={"recalibrate": True}),
            "curves.recalibrate",
            "must be one of 'none', 'spread', 'full'",
        ),
        (
            lambda d: d.update(stages={"enabled": "yes"}),
            "stages.enabled",
            "must be true or false, but got 'yes'",
        ),
        (
            lambda d: d.update(stages={"enabled": True, "scheduler": "dfs"}),
            "stages.scheduler",
            "'critical-path', 'bfs', 'most-children'",
        ),
        (
            lambda d: d.update(stages={"enabled": True}, policy={"name": "bandit"}),
            "stages.enabled",
            'not with \'bandit\'; set [policy] name = "default" or "sha"',
        ),
        (
            lambda d: d.update(
                stages={"enabled": True}, policy={"name": "median", "hard_stop": False}
            ),
            "policy.hard_stop",
            "remove `policy.hard_stop = false` or set stages.enabled = false",
        ),
    ],
)
def test_error_messages(mutate: Callable[[dict[str, Any]], Any], field: str, message: str) -> None:
    doc = base_doc()
    mutate(doc)
    result, folder = _load_in_fresh_dir(doc)
    assert isinstance(result, StudySpecError)
    assert result.field == field
    assert message in result.message
    assert result.path == folder / "study.toml"


# ----------------------------------------------------------------------------------------------
# Property: every single mutation of a valid spec is caught and names the mutated field

_INT_FIELDS = ("max_steps", "boundary", "num_trials", "seed", "max_retries")
_STR_FIELDS = ("name", "entry_point", "metric", "step_unit", "directory", "mode")
_REQUIRED = ("name", "entry_point", "metric", "mode", "max_steps", "num_trials")
_MIN = {"max_steps": 1, "boundary": 1, "num_trials": 1, "seed": 0, "max_retries": 0}
_TOML_INT = st.integers(-(2**63), 2**63 - 1)
_FINITE = st.floats(allow_nan=False, allow_infinity=False)
_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_KEY = st.from_regex(r"[a-z][a-z_]{0,10}", fullmatch=True)
_NOT_INT = st.one_of(_TEXT, _FINITE, st.booleans(), st.lists(st.integers(0, 9), max_size=2))
_NOT_STR = st.one_of(_TOML_INT, _FINITE, st.booleans(), st.lists(_TEXT, max_size=2))
_NOT_BOOL = st.one_of(_TOML_INT, _FINITE, _TEXT)

Mutation = tuple[dict[str, Any], frozenset[str]]


@st.composite
def mutations(draw: st.DrawFn) -> Mutation:
    doc = base_doc()
    study, space = doc["study"], doc["search_space"]
    kind = draw(
        st.sampled_from(
            [
                "int_type",
                "int_range",
                "str_type",
                "bad_name",
                "bad_mode",
                "blank",
                "bad_entry",
                "bool_type",
                "missing",
                "unknown_key",
                "unknown_section",
                "space",
                "resources",
                "components",
            ]
        )
    )
    if kind == "int_type":
        key = draw(st.sampled_from(_INT_FIELDS))
        study[key] = draw(_NOT_INT)
        return doc, frozenset({f"study.{key}"})
    if kind == "int_range":
        key = draw(st.sampled_from(_INT_FIELDS))
        # the values next to the limit are the likeliest slips: draw them often
        bad = st.one_of(st.just(_MIN[key] - 1), st.integers(-(2**63), _MIN[key] - 1))
        if key == "boundary":
            bad = st.one_of(bad, st.just(21), st.integers(study["max_steps"] + 1, 2**63 - 1))
        study[key] = draw(bad)
        return doc, frozenset({f"study.{key}"})
    if kind == "str_type":
        key = draw(st.sampled_from(_STR_FIELDS))
        study[key] = draw(_NOT_STR)
        return doc, frozenset({f"study.{key}"})
    if kind == "bad_name":
        study["name"] = draw(
            _TEXT.filter(lambda s: not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", s))
        )
        return doc, frozenset({"study.name"})
    if kind == "bad_mode":
        study["mode"] = draw(_TEXT.filter(lambda s: s not in ("max", "min")))
        return doc, frozenset({"study.mode"})
    if kind == "blank":
        key = draw(st.sampled_from(("metric", "step_unit", "name", "entry_point", "directory")))
        study[key] = draw(st.from_regex(r"[ \t]*", fullmatch=True))
        return doc, frozenset({f"study.{key}"})
    if kind == "bad_entry":
        study["entry_point"] = draw(
            st.one_of(
                st.from_regex(r"[a-z]{1,8}\.py:train", fullmatch=True).filter(
                    lambda s: s != "train.py:train"
                ),
                st.sampled_from(
                    ["train.py", "train.py:", ":train", "my module:f", "train.py:1f", "a..b:f"]
                ),
            )
        )
        return doc, frozenset({"study.entry_point"})
    if kind == "bool_type":
        study["fail_fast"] = draw(_NOT_BOOL)
        return doc, frozenset({"study.fail_fast"})
    if kind == "missing":
        key = draw(st.sampled_from(_REQUIRED))
        del study[key]
        return doc, frozenset({f"study.{key}"})
    if kind == "unknown_key":
        where = draw(st.sampled_from(["study", "resources", "lr", "sched", "policy", "generator"]))
        if where in ("study", "resources"):
            valid = STUDY_KEYS if where == "study" else RESOURCE_KEYS
            key = draw(_KEY.filter(lambda k: k not in valid))
            doc[where][key] = 1
            return doc, frozenset({f"{where}.{key}"})
        if where in ("policy", "generator"):
            key = draw(_KEY.filter(lambda k: k != "name"))
            doc[where][key] = 1
            return doc, frozenset({f"{where}.{key}"})
        key = draw(_KEY.filter(lambda k: k not in space[where]))
        if where == "sched":
            key = draw(_KEY.filter(lambda k: k not in ("base", "step_size", "gamma", "integer")))
        space[where][key] = 1
        return doc, frozenset({f"search_space.{where}.{key}"})
    if kind == "unknown_section":
        key = draw(_KEY.filter(lambda k: k not in SECTIONS))
        doc[key] = {"x": 1}
        return doc, frozenset({key})
    if kind == "space":
        return draw(_space_mutation(doc))
    if kind == "resources":
        key = draw(st.sampled_from(RESOURCE_COUNTS))
        low = 0 if key in ("gpus_per_worker", "slots") else 1  # slots = 0: ask/tell only
        doc["resources"][key] = draw(
            st.one_of(_NOT_INT, st.just(low - 1), st.integers(-(2**63), low - 1))
        )
        return doc, frozenset({f"resources.{key}"})
    which = draw(st.sampled_from(["generator", "policy"]))
    doc[which]["name"] = draw(
        st.one_of(_TEXT.filter(lambda s: s not in ("default", *GENERATORS)), _NOT_STR)
    )
    return doc, frozenset({f"{which}.name"})


@st.composite
def _space_mutation(draw: st.DrawFn, doc: dict[str, Any]) -> Mutation:
    space = doc["search_space"]
    lr, layers, sched = space["lr"], space["layers"], space["sched"]
    then = space["warm"]["then"]
    kind = draw(st.integers(0, 11))
    if kind == 0:
        lr["low"] = draw(st.floats(0.1, 1e3))
        return doc, frozenset({"search_space.lr.low", "search_space.lr.high"})
    if kind == 1:
        lr["low"] = draw(st.floats(-1e3, 0.0))
        return doc, frozenset({"search_space.lr.low"})
    if kind == 2:
        layers[draw(st.sampled_from(["low", "high"]))] = draw(
            st.floats(1.01, 3.99).filter(lambda x: x != int(x))
        )
        return doc, frozenset({"search_space.layers.low", "search_space.layers.high"})
    if kind == 3:
        lr["type"] = draw(
            st.one_of(_TEXT.filter(lambda s: s not in ("float", "int", "schedule")), _NOT_STR)
        )
        return doc, frozenset({"search_space.lr.type"})
    if kind == 4:
        sched["step_size"] = [5, draw(st.integers(-(2**63), 0))]
        return doc, frozenset({"search_space.sched.step_size"})
    if kind == 5:
        sched["gamma"] = draw(st.one_of(st.floats(-1e3, 0.0), _TEXT, st.booleans()))
        return doc, frozenset({"search_space.sched.gamma"})
    if kind == 6:
        then["total_steps"] = draw(st.one_of(st.integers(-(2**63), 0), _FINITE, _TEXT))
        return doc, frozenset({"search_space.warm.then.total_steps"})
    if kind == 7:
        sched["shape"] = draw(_TEXT.filter(lambda s: s != "step"))
        return doc, frozenset({"search_space.sched.shape"})
    if kind == 8:
        space["bs"] = []
        return doc, frozenset({"search_space.bs"})
    if kind == 9:
        del then[draw(st.sampled_from(["base", "total_steps"]))]
        return doc, frozenset(
            {"search_space.warm.then.base", "search_space.warm.then.total_steps"}
        )
    if kind == 10:
        lr["grid_points"] = draw(st.one_of(st.integers(-(2**63), 1), _FINITE, _TEXT))
        return doc, frozenset({"search_space.lr.grid_points"})
    space["opt"] = draw(st.one_of(st.just({"x": 1}), st.lists(st.just([1]), min_size=1)))
    return doc, frozenset({"search_space.opt"})


@settings(max_examples=300, deadline=None)
@given(mutation=mutations())
def test_every_mutation_is_caught_and_names_its_field(mutation: Mutation) -> None:
    doc, fields = mutation
    result, folder = _load_in_fresh_dir(doc)
    assert isinstance(result, StudySpecError), f"not rejected: {to_toml(doc)}"
    assert result.field in fields, f"{result.field!r} not in {sorted(fields)}: {result}"
    assert result.path == folder / "study.toml"
    assert result.message
    assert str(result).startswith(str(folder / "study.toml"))


# ----------------------------------------------------------------------------------------------
# Property: valid specs load as written and round-trip through to_dict/from_dict


@st.composite
def valid_docs(draw: st.DrawFn) -> dict[str, Any]:
    doc = base_doc()
    study = doc["study"]
    study["name"] = draw(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,15}", fullmatch=True))
    study["max_steps"] = draw(st.integers(1, 10_000))
    study["boundary"] = draw(st.integers(1, study["max_steps"]))
    study["seed"] = draw(st.integers(0, 2**63 - 1))
    study["max_retries"] = draw(st.integers(0, 100))
    study["fail_fast"] = draw(st.booleans())
    study["mode"] = draw(st.sampled_from(["min", "max"]))
    study["metric"] = draw(_TEXT.filter(str.strip))
    study["step_unit"] = draw(_TEXT.filter(str.strip))
    study["directory"] = draw(st.sampled_from(["runs/{name}-{timestamp}", "out", "../{name}"]))
    doc["resources"] = {
        k: draw(st.integers(1 if k != "gpus_per_worker" else 0, 64))
        for k in draw(st.sets(st.sampled_from(RESOURCE_COUNTS)))
    }
    if draw(st.booleans()):
        doc["generator"] = {"name": "grid", "shuffle": draw(st.booleans())}
        doc["search_space"] = {
            "a": draw(st.lists(st.integers(0, 100), min_size=1, max_size=4, unique=True)),
            "lr": {
                "type": "float",
                "low": 1e-4,
                "high": 1.0,
                "log": True,
                "grid_points": draw(st.integers(2, 5)),
            },
            "sched": doc["search_space"]["sched"],
        }
        del study["num_trials"]
    else:
        study["num_trials"] = draw(st.integers(1, 10_000))
    return doc


@settings(max_examples=100, deadline=None)
@given(doc=valid_docs())
def test_valid_specs_load_and_round_trip(doc: dict[str, Any]) -> None:
    result, folder = _load_in_fresh_dir(doc)
    assert isinstance(result, StudySpec), str(result)
    spec = result
    for key in ("name", "metric", "mode", "max_steps", "step_unit", "boundary", "seed"):
        assert getattr(spec, key) == doc["study"][key]
    assert spec.resources == ResourcesSpec(**doc["resources"])
    if doc["generator"]["name"] == "grid":
        assert spec.num_trials == spec.space.grid_size()
    assert spec.directory.is_absolute()
    assert spec.source == folder / "study.toml"
    d = json.loads(json.dumps(spec.to_dict()))
    again = StudySpec.from_dict(d)
    assert again == spec
    assert again.to_dict() == spec.to_dict()


def test_curves_section_round_trips_and_a_journaled_spec_without_recalibrate_reads_none(
    tmp_path: Path,
) -> None:
    doc = base_doc()
    doc["curves"] = {"recalibrate": "spread", "workers": 2}
    spec = load_spec(_write(tmp_path, doc), now=NOW)
    assert (spec.curves.recalibrate, spec.curves.workers) == ("spread", 2)
    data = json.loads(json.dumps(spec.to_dict()))
    assert StudySpec.from_dict(data) == spec
    del data["curves"]["recalibrate"]  # a study journaled before the option existed
    assert StudySpec.from_dict(data).curves.recalibrate == "none"


def test_stages_section_round_trips(tmp_path: Path) -> None:
    doc = base_doc()
    doc["stages"] = {"enabled": True, "scheduler": "bfs"}
    doc["policy"] = {"name": "default"}
    spec = load_spec(_write(tmp_path, doc), now=NOW)
    assert (spec.stages.enabled, spec.stages.scheduler) == (True, "bfs")
    again = StudySpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again.stages == spec.stages
    assert not load_spec(_write(tmp_path, base_doc()), now=NOW).stages.enabled


def test_from_dict_names_a_missing_key(tmp_path: Path) -> None:
    d = load_spec(_write(tmp_path, base_doc())).to_dict()
    del d["metric"]
    with pytest.raises(StudySpecError) as info:
        StudySpec.from_dict(d)
    assert info.value.field == "metric"


def test_parse_spec_takes_a_mapping(tmp_path: Path) -> None:
    _write(tmp_path, base_doc())
    spec = parse_spec(copy.deepcopy(base_doc()), source=tmp_path / "study.toml", now=NOW)
    assert spec.name == "demo"
    assert spec.source == tmp_path / "study.toml"


def test_complete_example_in_the_docs_loads(tmp_path: Path) -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "study-toml.md").read_text()
    example = doc.split("## Complete example", 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    spec = load_spec(_write(tmp_path, example), now=NOW)
    assert spec.name == "resnet20-lr"
    assert list(spec.space.params) == [
        "optimizer",
        "momentum",
        "weight_decay",
        "batch_size",
        "width",
        "lr",
    ]
    assert spec.resources == ResourcesSpec(slots=4, cpus_per_worker=8, gpus_per_worker=1)


def test_every_toml_snippet_in_the_docs_parses_as_a_search_space() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "study-toml.md").read_text()
    snippets = [s.split("```", 1)[0] for s in doc.split("```toml\n")[1:]]
    assert len(snippets) >= 4
    checked = 0
    for snippet in snippets:
        if snippet.lstrip().startswith("[study]"):
            continue
        if snippet.lstrip().startswith("[search_space"):
            parse_space(tomllib.loads(snippet)["search_space"], path=None)
            checked += 1
            continue
        # one-line parameters (the examples repeat `lr`, so parse them one by one)
        for line in snippet.splitlines():
            if line.strip() and not line.startswith("#"):
                parse_space(tomllib.loads(line), path=None)
                checked += 1
    assert checked == 12
