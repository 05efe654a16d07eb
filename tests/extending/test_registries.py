"""Policies, generators and curve models from outside hpctune: by ``MODULE:CLASS`` and by an
entry point, in a real study, in the simulator and in ``hpctune check-policy``; an unknown or
wrong one is an error that names it, a close match and the known ones (exit 2).

The toy plug-ins (tests/plugins/hpctune_toy_plugins.py) are another package's: nothing inside
``hpctune/`` names them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hpctune.api import open_study
from hpctune.cli import main
from hpctune.curves import CurveRequest, FitOptions, fit_many, make_curve_model
from hpctune.curves.options import parse_curves
from hpctune.curves.registry import curve_model_names
from hpctune.errors import StudySpecError
from hpctune.plugins import PluginError
from hpctune.policies import OptionError, StudyContext, make_policy, policy_names
from hpctune.policies.generators import generator_names, make_generator
from hpctune.study.space import parse_space
from hpctune.study.states import StudyState, TrialStatus
from tests.conftest import hpctune_env, kill_workers, write_study

REPO = Path(__file__).resolve().parents[2]
PLUGINS = Path(__file__).resolve().parents[1] / "plugins"
DIGITS = REPO / "benchmarks" / "traces" / "digits.h5"
TOY = "hpctune_toy_plugins"
CONTEXT = StudyContext(max_steps=5)
SPACE = parse_space({"x": [1.0, 2.0, 3.0]}, path=None)
TRAIN = """
def train(ctx):
    for step in range(ctx.start_step, ctx.max_steps):
        ctx.report(step=step + 1, score=ctx.params["x"] * (step + 1))
"""


@pytest.fixture
def plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """The toy plug-ins' folder on ``sys.path`` (as an installed package's would be)."""
    monkeypatch.syspath_prepend(str(PLUGINS))


@pytest.fixture
def entry_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plugins: None) -> None:
    """The toy plug-ins registered by entry points, as pip installs a package's."""
    info = tmp_path / "site" / "hpctune_toy_plugins-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: hpctune-toy-plugins\nVersion: 0.1\n"
    )
    (info / "entry_points.txt").write_text(
        f"[hpctune.policies]\ntoy = {TOY}:ToyPolicy\n\n"
        f"[hpctune.generators]\nbackwards = {TOY}:BackwardsGenerator\n\n"
        f"[hpctune.curve_models]\nflat = {TOY}:FlatModel\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out + out.err


# -- policies ------------------------------------------------------------------------------------


def test_a_policy_by_module_class_is_built_with_its_options(plugins: None) -> None:
    policy = make_policy(f"{TOY}:ToyPolicy", {"priority": 2.0}, CONTEXT)
    assert type(policy).__name__ == "ToyPolicy"
    assert policy.options.priority == 2.0  # type: ignore[attr-defined]
    assert policy.context == CONTEXT
    with pytest.raises(OptionError, match="unknown option; valid options: priority") as err:
        make_policy(f"{TOY}:ToyPolicy", {"prio": 1.0}, CONTEXT)
    assert err.value.key == "prio"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("pop2", "unknown policy 'pop2'; did you mean 'pop'? known policies: default, bandit"),
        (
            f"{TOY}:NotAPolicy",
            "is the class hpctune_toy_plugins.NotAPolicy, not a Policy subclass",
        ),
        (f"{TOY}:Missing", "hpctune_toy_plugins has no 'Missing'"),
        ("no_such_module_x:Policy", "cannot import 'no_such_module_x'"),
    ],
)
def test_an_unknown_or_wrong_policy_is_an_option_error_of_the_name(
    plugins: None, name: str, message: str
) -> None:
    with pytest.raises(OptionError) as err:
        make_policy(name, {}, CONTEXT)
    assert err.value.key == "name"
    assert message in err.value.message


# -- generators ----------------------------------------------------------------------------------


def test_a_generator_by_module_class_proposes_its_configurations(plugins: None) -> None:
    generator = make_generator(f"{TOY}:BackwardsGenerator", {}, SPACE, 0)
    assert [generator.suggest(i)["x"] for i in range(3)] == [3.0, 2.0, 1.0]
    assert generator.size() == 3
    with pytest.raises(OptionError) as err:
        make_generator(f"{TOY}:BackwardsGenerator", {"shuffle": True}, SPACE, 0)
    assert err.value.key == "shuffle"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("grd", "unknown generator 'grd'; did you mean 'grid'? known generators: random, grid"),
        (f"{TOY}:ToyPolicy", "not a Generator subclass"),
    ],
)
def test_an_unknown_or_wrong_generator_is_an_option_error_of_the_name(
    plugins: None, name: str, message: str
) -> None:
    with pytest.raises(OptionError) as err:
        make_generator(name, {}, SPACE, 0)
    assert err.value.key == "name"
    assert message in err.value.message


# -- curve models --------------------------------------------------------------------------------


def test_hpctunes_curve_models_are_found_by_name() -> None:
    amortised, domhan = make_curve_model("amortised"), make_curve_model("domhan")
    assert (amortised.name, amortised.batched, amortised.min_points) == ("amortised", True, 3)
    assert (domhan.name, domhan.batched, domhan.min_points) == ("domhan", False, 3)
    assert curve_model_names()[:2] == ["amortised", "domhan"]


def test_a_curve_model_by_module_class_predicts(plugins: None) -> None:
    requests = [
        CurveRequest(key=k, y=(0.1, 0.2, 0.3 + k / 10), x_max=6, bounds=(0.0, 1.0), seed=k)
        for k in range(3)
    ]
    predictions = fit_many(requests, FitOptions(model=f"{TOY}:FlatModel"))
    assert [p.median[-1] for p in predictions] == pytest.approx([0.3, 0.4, 0.5])
    assert not np.any(np.diff(predictions[0].u_quantiles, axis=1))  # no spread


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("amortized", "unknown curve model 'amortized'; did you mean 'amortised'? known curve "),
        (f"{TOY}:NoPredict", "lacks predict"),
        (f"{TOY}:NotAPolicy", "lacks name, min_points, batched, predict"),
        (f"{TOY}:unknown_prediction", "is the function unknown_prediction, not a class"),
    ],
)
def test_an_unknown_or_wrong_curve_model_is_a_plugin_error(
    plugins: None, name: str, message: str
) -> None:
    with pytest.raises(PluginError) as err:
        make_curve_model(name)
    assert message in str(err.value)
    assert err.value.exit_code == 2


def test_curves_model_in_study_toml_is_checked_at_spec_load(plugins: None) -> None:
    path = Path("study.toml")
    assert parse_curves({"model": f"{TOY}:FlatModel"}, path).model == f"{TOY}:FlatModel"
    assert parse_curves({}, path).model == "amortised"
    with pytest.raises(StudySpecError) as err:
        parse_curves({"model": "domahn"}, path)
    assert err.value.field == "curves.model"
    assert "did you mean 'domhan'?" in err.value.message
    with pytest.raises(StudySpecError, match="must be a curve model's name") as err:
        parse_curves({"model": 3}, path)
    assert err.value.field == "curves.model"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["fit-curves", str(DIGITS), "--model", "amortized"], "curve model 'amortized'"),
        (
            ["simulate", "--trace", str(DIGITS), "--policy", "pop", "--curve-model", "amortized"],
            "unknown curve model 'amortized'; did you mean 'amortised'? known curve models: "
            "amortised, domhan",
        ),
        (
            ["simulate", "--trace", str(DIGITS), "--policy", "ahsa"],
            "unknown policy 'ahsa'; did you mean 'asha'? known policies: default, bandit",
        ),
        (
            ["simulate", "--trace", str(DIGITS), "--policy", "asha", "--generator", "tep"],
            "unknown generator 'tep'; did you mean 'tpe'? known generators: random, grid",
        ),
        (["check-policy", "ahsa"], "unknown policy 'ahsa'; did you mean 'asha'?"),
    ],
)
def test_an_unknown_name_on_the_command_line_exits_2_with_a_close_match(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, text = _run(capsys, *args)
    assert code == 2
    assert message in text


def test_fit_curves_takes_a_curve_model_by_module_class(
    plugins: None, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["fit-curves", str(DIGITS), "--trial", "3", "--trial", "7", "--at-epoch", "5"]
    code, out = _run(capsys, *args, "--model", f"{TOY}:FlatModel", "--json")
    assert code == 0, out
    rows = json.loads(out)
    assert [row["trial"] for row in rows] == [3, 7]
    for row in rows:  # the flat model: the last value, with no spread
        assert row["median"] == pytest.approx(row["last"], abs=1e-4)
        assert row["q05"] == row["q95"] == row["median"]


# -- the simulator and check-policy --------------------------------------------------------------


def test_simulate_runs_a_policy_and_a_curve_model_by_module_class(
    plugins: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    predictions = tmp_path / "predictions.jsonl"
    code, out = _run(
        capsys,
        "simulate",
        "--trace",
        str(DIGITS),
        "--policy",
        f"{TOY}:ToyPolicy",
        "--policy",
        "earlyterm",
        "--option",
        f"{TOY}:ToyPolicy.priority=2",
        "--option",
        "earlyterm.boundary=5",
        "--curve-model",
        f"{TOY}:FlatModel",
        "--predictions",
        str(predictions),
        "--seeds",
        "1",
        "--num-trials",
        "24",
        "--json",
    )
    assert code == 0, out
    doc = json.loads(out)
    toy, earlyterm = doc["policies"]
    assert toy["policy"] == "toy"
    assert toy["options"] == {"priority": 2}
    assert toy["runs"][0]["trials_started"] == 24
    assert earlyterm["policy"] == "earlyterm"
    fitted = [json.loads(line)["prediction"] for line in predictions.read_text().splitlines()]
    assert fitted  # EarlyTerm asked the flat model
    assert all(not p["unknown"] and p["sigma"] == 0.0 for p in fitted)
    assert all(len(set(row)) == 1 for p in fitted for row in p["u_quantiles"])


def test_check_policy_takes_a_policy_by_module_class(
    plugins: None, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["check-policy", f"{TOY}:ToyPolicy", "--options", '{"priority": 1.5}', "--views", "30"]
    code, out = _run(capsys, *args)
    assert code == 0, out
    assert "policy 'toy' passed" in out
    code, out = _run(capsys, "check-policy", f"{TOY}:NotAPolicy")
    assert code == 2
    assert "not a Policy subclass" in out


# -- entry points --------------------------------------------------------------------------------


def test_plugins_registered_by_entry_points_are_found_by_name(
    entry_points: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert type(make_policy("toy", {"priority": 1.0}, CONTEXT)).__name__ == "ToyPolicy"
    assert policy_names()[-1] == "toy"  # after hpctune's own
    assert "toy" in policy_names(boundary_decisions=False)
    assert "toy" not in policy_names(rungs_known=True)
    with pytest.raises(OptionError, match=r"did you mean 'toy'\?"):
        make_policy("tyo", {}, CONTEXT)
    assert [make_generator("backwards", {}, SPACE, 0).suggest(0)] == [{"x": 3.0}]
    assert "backwards" in generator_names()
    assert make_curve_model("flat").name == "flat"
    assert "flat" in curve_model_names()
    assert parse_curves({"model": "flat"}, Path("study.toml")).model == "flat"
    code, out = _run(capsys, "check-policy", "toy", "--views", "20")
    assert code == 0, out
    code, out = _run(
        capsys, "simulate", "--trace", str(DIGITS), "--policy", "toy", "--seeds", "1", "--json"
    )
    assert code == 0, out
    assert json.loads(out)["policies"][0]["policy"] == "toy"


# -- a real study --------------------------------------------------------------------------------


def _hpctune(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**hpctune_env(), "PYTHONPATH": os.pathsep.join([str(PLUGINS), str(REPO)])}
    return subprocess.run(
        [sys.executable, "-m", "hpctune.cli", *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=cwd,
    )


def test_a_study_runs_a_policy_and_a_generator_by_module_class(tmp_path: Path) -> None:
    spec = write_study(
        tmp_path,
        train=TRAIN,
        space={"x": [1.0, 2.0, 3.0]},
        num_trials=3,
        max_steps=3,
        policy={"name": f"{TOY}:ToyPolicy", "priority": 3.0},
        generator={"name": f"{TOY}:BackwardsGenerator"},
    )
    study_dir = tmp_path / "study"
    try:
        launched = _hpctune("launch", str(spec), "--local", cwd=tmp_path)
        assert launched.returncode == 0, launched.stdout + launched.stderr
        study = open_study(study_dir)
        assert study.record.state is StudyState.FINISHED, study.record.reason
        trials = sorted(study.record.trials.values(), key=lambda t: t.trial_id)
        assert [t.status for t in trials] == [TrialStatus.COMPLETED] * 3
        assert [t.params["x"] for t in trials] == [3.0, 2.0, 1.0]  # the generator's order
        assert [t.priority for t in trials] == [3.0] * 3  # the policy's option
        assert study.record.policy_state == {"started": 3}  # the policy's state, journaled
        assert study.spec["policy"]["name"] == f"{TOY}:ToyPolicy"
    finally:
        kill_workers(study_dir)


@pytest.mark.parametrize(
    ("table", "field", "message"),
    [
        ("policy", "policy.name", "not a Policy subclass"),
        ("generator", "generator.name", "not a Generator subclass"),
    ],
)
def test_launch_refuses_a_class_that_is_not_a_policy_or_generator(
    plugins: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    table: str,
    field: str,
    message: str,
) -> None:
    parts = {table: {"name": f"{TOY}:NotAPolicy"}}
    spec = write_study(tmp_path, train=TRAIN, space={"x": [1.0]}, num_trials=1, **parts)
    code, text = _run(capsys, "launch", str(spec), "--local")
    assert code == 2
    assert f"field '{field}'" in text
    assert message in text
    assert not (tmp_path / "study").exists()
