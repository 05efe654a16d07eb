"""Model-based generators (Optuna's samplers fed from the view), conditional parameters, the
nearest-configuration rule, BOHB's budget rule, the Pareto front, and ``simulate --generator``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hpctune.analysis.pareto import non_dominated
from hpctune.cli import cli
from hpctune.errors import StudySpecError
from hpctune.policies import OptionError, StudyView, TrialView
from hpctune.policies.generators import first_proposals, make_generator
from hpctune.policies.generators._optuna_space import draw_config, encode_config
from hpctune.policies.generators.optuna_sampler import choose_budget, value_at
from hpctune.simulator import simulate
from hpctune.simulator.nearest import NearestConfigurations, infer_space
from hpctune.simulator.traces import Trace
from hpctune.study.space import SearchSpace, parse_space
from hpctune.study.states import TrialStatus
from tests.conftest import DIGITS, write_study

REPO = Path(__file__).resolve().parents[2]
TRACE = REPO / "benchmarks/traces/digits.h5"

SPACE = parse_space(
    {
        "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
        "hidden": {"type": "int", "low": 8, "high": 128, "log": True},
        "optimizer": ["sgd", "adam"],
        "momentum": {"type": "float", "low": 0.5, "high": 0.99, "when": {"optimizer": "sgd"}},
        "width": 3,
        "sched": {"type": "schedule", "shape": "cosine", "base": [0.1, 0.2], "total_steps": 10},
    },
    path=None,
)


def _view(trials: dict[int, TrialView], max_steps: int = 10, **kw: object) -> StudyView:
    return StudyView(
        metric="acc",
        mode="max",
        max_steps=max_steps,
        boundary=1,
        now=0.0,
        trials=trials,
        free_slots=1,
        total_slots=2,
        trials_remaining=None,
        **kw,  # type: ignore[arg-type]
    )


def _curve(trial_id: int, params: dict, status: TrialStatus, values: list[float], info=None):
    steps = np.arange(1, len(values) + 1)
    return TrialView(
        trial_id,
        status,
        params,
        step=len(values),
        steps=steps,
        values=np.asarray(values, dtype=float),
        info=info or {},
    )


def _score(params: dict) -> float:
    return -abs(math.log10(params["lr"]) + 2.0)  # best at lr = 0.01


def test_conditional_space_samples_grids_and_refuses_bad_conditions() -> None:
    rng = np.random.default_rng(0)
    configs = [SPACE.sample(rng) for _ in range(50)]
    assert all(("momentum" in c) == (c["optimizer"] == "sgd") for c in configs)
    assert {c["optimizer"] for c in configs} == {"sgd", "adam"}
    grid = parse_space(
        {
            "opt": ["sgd", "adam"],
            "m": {"type": "categorical", "choices": [0.5, 0.9], "when": {"opt": ["sgd"]}},
        },
        path=None,
    )
    assert grid.grid() == [{"opt": "sgd", "m": 0.5}, {"opt": "sgd", "m": 0.9}, {"opt": "adam"}]
    assert grid.grid_size() == 3
    assert grid.grid_point(2) == {"opt": "adam"}
    assert SearchSpace.from_dict(SPACE.to_dict()) == SPACE
    with pytest.raises(StudySpecError, match="not a choice of `optimizer`"):
        parse_space(
            {
                "optimizer": ["sgd"],
                "m": {"type": "float", "low": 0, "high": 1, "when": {"optimizer": "rmsprop"}},
            },
            path=None,
        )
    with pytest.raises(StudySpecError, match="declared before"):
        parse_space({"m": {"type": "float", "low": 0, "high": 1, "when": {"opt": "a"}}}, path=None)


def test_optuna_space_round_trip() -> None:
    values = {"lr": 0.01, "hidden": 32, "optimizer": "sgd", "momentum": 0.9, "sched.base": 0.2}
    config = draw_config(SPACE, lambda d: values[d.name])
    assert config["sched"]["base"] == 0.2
    assert config["width"] == 3
    assert encode_config(SPACE, config) == values
    adam = draw_config(SPACE, lambda d: {**values, "optimizer": "adam"}[d.name])
    assert "momentum" not in adam
    assert encode_config(SPACE, {**config, "lr": 5.0}).get("lr") is None  # out of range


@pytest.mark.parametrize("name", ["tpe", "cmaes", "gp", "qmc", "nsga2"])
def test_proposals_are_a_pure_function_of_seed_index_and_view(name: str) -> None:
    options = {"n_startup_trials": 3} if name in ("tpe", "gp", "cmaes") else {}
    if name == "nsga2":
        options = {"population_size": 4}
    gen = make_generator(name, options, SPACE, 11)
    trials: dict[int, TrialView] = {}
    count = 4 if name == "gp" else 8  # a GP fit per proposal is slow
    for i in range(count):
        proposal = gen.propose(i, _view(dict(trials)))
        again = make_generator(name, options, SPACE, 11).propose(i, _view(dict(trials)))
        assert again == proposal  # a restarted controller proposes the same
        assert SPACE.is_active("momentum", proposal.params) == ("momentum" in proposal.params)
        info = json.loads(json.dumps(proposal.info))  # as journaled
        status = TrialStatus.RUNNING if i == count - 1 else TrialStatus.COMPLETED
        trials[i] = _curve(i, proposal.params, status, [_score(proposal.params)] * 10, info)
    other = make_generator(name, options, SPACE, 12).propose(count, _view(trials))
    assert other != gen.propose(count, _view(trials))  # the seed matters


def test_tpe_learns_from_the_view() -> None:
    gen = make_generator("tpe", {"n_startup_trials": 5}, SPACE, 3)
    trials: dict[int, TrialView] = {}
    for i in range(30):
        params = gen.propose(i, _view(dict(trials))).params
        trials[i] = _curve(i, params, TrialStatus.COMPLETED, [_score(params)] * 10)
    late = [abs(math.log10(trials[i].params["lr"]) + 2) for i in range(20, 30)]
    early = [abs(math.log10(trials[i].params["lr"]) + 2) for i in range(0, 5)]
    assert np.median(late) < np.median(early)


def test_bohb_budget_rule_and_terminated_trials() -> None:
    params = {"lr": 0.01, "hidden": 16, "optimizer": "adam", "sched": {}}
    trials = {i: _curve(i, params, TrialStatus.TERMINATED, [0.1 * i]) for i in range(6)}
    trials.update(
        {6 + i: _curve(6 + i, params, TrialStatus.SUSPENDED, [0.2] * 3) for i in range(3)}
    )
    trials[9] = _curve(9, params, TrialStatus.COMPLETED, [0.3] * 10)
    view = _view(trials)
    assert choose_budget(view, 3, True) == 3  # 4 trials reached step 3, 1 reached 10
    assert choose_budget(view, 5, True) == 1
    assert choose_budget(view, 3, False) == 10
    assert value_at(trials[9], 3) == 0.3
    assert value_at(trials[0], 3) is None


def test_generator_options_are_checked() -> None:
    with pytest.raises(OptionError, match=r"valid options: pending.*n_startup_trials"):
        make_generator("tpe", {"n_startup": 3}, SPACE, 0)
    with pytest.raises(OptionError, match="unknown sampler"):
        make_generator("optuna", {"sampler": "bogus"}, SPACE, 0)
    with pytest.raises(OptionError, match="must be true or false"):
        make_generator("tpe", {"multivariate": 1}, SPACE, 0)
    gen = make_generator("optuna", {"sampler": "cmaes", "sigma0": 0.5}, SPACE, 0)
    assert gen.options.sampler_options == {"sigma0": 0.5}


def test_spec_objectives_and_single_objective_generators(tmp_path: Path) -> None:
    from hpctune.spec import load_spec

    objectives = {"val_accuracy": "max", "num_params": "min"}
    path = write_study(
        tmp_path, train=DIGITS / "train.py", space={"x": [1, 2]}, objectives=objectives
    )
    with pytest.raises(StudySpecError, match="must be one of the objectives"):
        load_spec(path)  # metric = "score" is not an objective
    text = path.read_text().replace('metric = "score"\n', "").replace('mode = "max"\n', "")
    path.write_text(text)
    spec = load_spec(path)
    assert (spec.metric, spec.mode) == ("val_accuracy", "max")
    assert spec.objectives == (("val_accuracy", "max"), ("num_params", "min"))
    path.write_text(text + '\n[generator]\nname = "cmaes"\n')
    with pytest.raises(StudySpecError, match="optimises one metric"):
        load_spec(path)


def test_pareto_non_dominated() -> None:
    points = np.array([[1, 1], [2, 0], [0, 2], [1, 0], [2, 0]])
    assert non_dominated(points).tolist() == [0, 1, 2, 4]


def test_nearest_rule_log_scale_categorical_and_absent() -> None:
    configs = [
        {"lr": 1e-4, "hidden": 8, "optimizer": "sgd", "momentum": 0.5},
        {"lr": 1e-3, "hidden": 8, "optimizer": "adam"},
        {"lr": 3e-2, "hidden": 8, "optimizer": "sgd", "momentum": 0.5},
    ]
    space = parse_space(
        {k: v for k, v in SPACE.to_dict().items() if k not in ("sched",)}, path=None
    )
    nearest = NearestConfigurations(space, configs)
    d = nearest.distances({"lr": 1e-3, "hidden": 8, "optimizer": "sgd", "momentum": 0.5})
    # lr: log scale, 1e-3 is 1/3 of the way from 1e-4 to 1e-1; optimizer mismatch and an
    # absent momentum count 1 each
    assert d[0] == pytest.approx(1 / 3)
    assert d[1] == pytest.approx(math.sqrt(2))
    assert d[2] == pytest.approx(math.log10(30) / 3)
    assert nearest.take({"lr": 1e-3, "hidden": 8, "optimizer": "sgd", "momentum": 0.5}) == 0
    assert nearest.take({"lr": 1e-4, "hidden": 8, "optimizer": "sgd", "momentum": 0.5}) == 2
    assert nearest.take({"lr": 1e-4}) == 1
    assert nearest.take({"lr": 1e-4}) is None
    inferred = infer_space(Trace.load(TRACE).hparams)
    assert inferred.params["weight_decay"].log
    assert inferred.params["lr"].type_name == "schedule"


def test_first_proposals_see_earlier_ones_as_pending() -> None:
    gen = make_generator("qmc", {}, SPACE, 5)
    first = first_proposals(gen, 4, metric="acc", mode="max", max_steps=10)
    assert len({json.dumps(p, sort_keys=True) for p in first}) == 4  # the QMC sequence advances


@pytest.mark.parametrize("policy", ["default", "asha", "hyperband", "sha", "median", "bandit"])
def test_simulate_with_a_generator_under_every_policy(policy: str) -> None:
    trace = Trace.load(TRACE).subset(range(24))
    result = simulate(trace, policy, slots=4, seed=1, generator="tpe", max_steps=9)
    assert result.trials_started == 24  # every configuration of the trace, each once
    assert sorted(t.config for t in result.trials) == list(range(24))


@pytest.mark.slow
def test_simulate_cli_with_generator(tmp_path: Path) -> None:
    trace = Trace.load(TRACE).subset(range(6))
    path = trace.save(tmp_path / "t.h5")
    out = CliRunner().invoke(
        cli,
        [
            "simulate",
            "--trace",
            str(path),
            "--policy",
            "asha",
            "--policy",
            "pop",
            "--generator",
            "tpe",
            "--seeds",
            "1",
            "--slots",
            "2",
            "--max-steps",
            "4",
            "--option",
            "pop.boundary=2",
            "--json",
        ],
    )
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["generator"] == {"name": "tpe", "options": {}}
    assert [p["summary"]["trials_started"]["median"] for p in doc["policies"]] == [6, 6]
