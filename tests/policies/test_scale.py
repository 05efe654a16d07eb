"""The scalable policies decide exactly as the straightforward computation (issue 15, item 2).

:mod:`tests.policies._reference` keeps each changed policy's former computation; here both are
driven side by side through random studies (the conformance kit's, run by the real scheduling
core) and through large hand-made ones, and must return the same
actions (reasons included), states and needed checkpoints. The order statistics read from
sorted values are numpy's, bit for bit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import struct
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpctune.policies import Event, EventKind, Policy, PolicyDecision, StudyView, TrialView
from hpctune.policies._order import median_skipping, percentile_of_sorted
from hpctune.policies.asha import AshaBracket
from hpctune.policies.median import MedianOptions, MedianStoppingPolicy
from hpctune.policies.pbt import PbtOptions, PbtPolicy
from hpctune.study.states import TrialStatus
from hpctune.testing import RandomStudy, default_space
from hpctune.testing._random_study import wrapper_type
from tests.policies._reference import (
    REFERENCES,
    ReferenceAshaBracket,
    ReferenceMedian,
    ReferencePbt,
)
from tests.policies._views import context

S = TrialStatus


def _same_float(a: float, b: float) -> bool:
    """Equal bits (NaN equals NaN; the sign of a zero, which numpy's partition leaves open,
    aside)."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if a == 0.0 and b == 0.0:
        return True
    return struct.pack("<d", a) == struct.pack("<d", b)


_VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, 0.25, 0.5, 1.0, -1.0, math.nan]),  # ties and NaN, often
)


@settings(max_examples=1500, deadline=None)
@given(values=st.lists(_VALUES, max_size=60), eta=st.integers(2, 12))
def test_percentile_of_sorted_values_is_nanpercentile_bit_for_bit(
    values: list[float], eta: int
) -> None:
    q = (1 - 1 / eta) * 100
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices, inf - inf
        expected = float(np.nanpercentile(values, q)) if values else math.nan
    found = percentile_of_sorted(sorted(v for v in values if not math.isnan(v)), q)
    assert _same_float(found, expected), (values, q, found, expected)


@settings(max_examples=1000, deadline=None)
@given(
    values=st.lists(st.floats(allow_nan=False, allow_infinity=True), min_size=1, max_size=40),
    data=st.data(),
)
def test_median_skipping_one_value_is_numpys_median_of_the_others(
    values: list[float], data: st.DataObject
) -> None:
    ordered = sorted(values)
    skip = data.draw(st.none() | st.integers(0, len(ordered) - 1))
    rest = ordered if skip is None else ordered[:skip] + ordered[skip + 1 :]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = float(np.median(rest)) if rest else math.nan
        found = median_skipping(ordered.__getitem__, len(ordered), skip)
    assert _same_float(found, expected), (rest, found, expected)


@settings(max_examples=300, deadline=None)
@given(
    results=st.lists(
        st.tuples(st.integers(0, 40), st.integers(1, 100), st.none() | _VALUES), max_size=150
    ),
    eta=st.integers(2, 5),
    restore_at=st.integers(0, 150),
)
def test_an_asha_bracket_stops_as_with_nanpercentile_over_every_value(
    results: list[tuple[int, int, float | None]], eta: int, restore_at: int
) -> None:
    bracket = AshaBracket(1, eta, 100)
    reference = ReferenceAshaBracket(1, eta, 100)
    for i, (trial_id, step, value) in enumerate(results):
        if i == restore_at:  # a restarted controller: the sorted values are made again
            state = bracket.state_dict()
            bracket = AshaBracket(1, eta, 100)
            bracket.load_state_dict(state)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            expected = reference.on_result(trial_id, step, value)
        assert bracket.on_result(trial_id, step, value) is expected
        assert bracket.stopped.keys() == reference.stopped.keys()
        for tid, (milestone, cutoff) in bracket.stopped.items():
            assert milestone == reference.stopped[tid][0]
            assert _same_float(cutoff, reference.stopped[tid][1])
    assert dict(bracket.rungs) == dict(reference.rungs)
    assert bracket.cutoff({}) is None


# -- policies side by side through random studies ---------------------------------------------

CASES: list[tuple[str, dict[str, Any]]] = [
    ("asha", {}),
    ("asha", {"brackets": 3, "reduction_factor": 2}),
    ("sha", {}),
    ("sha", {"reduction_factor": 2, "bracket_size": 3}),
    ("hyperband", {}),
    ("hyperband", {"reduction_factor": 2, "grace_period": 2}),
    ("median", {}),
    ("median", {"min_samples_required": 1}),
    ("median", {"grace_period": 3, "min_samples_required": 2}),
    ("median", {"hard_stop": False, "min_samples_required": 1, "min_time_slice": 2}),
    ("median", {"yield_slots": True, "min_time_slice": 1}),
    ("pop", {"boundary": 2}),
    ("pop", {"boundary": 1, "target": 0.8, "t_max": 100.0, "kill_threshold": 0.2}),
    ("pbt", {"population_size": 4, "steps_per_generation": 3}),
    ("pbt", {"population_size": 3, "steps_per_generation": 2, "budget": True}),
    ("pbt", {"population_size": 5, "budget": False, "opponent_generations": 3}),
    ("pbt-truncation", {"population_size": 4, "perturbation_interval": 2}),
]


class _Enough(BaseException):
    """The study was followed long enough (its core is left where it is)."""


class _SideBySide(Policy):
    """The policy and its straightforward reference given the same calls by the core: their
    actions (reasons included), states and needed checkpoints must be the same. Every 7th
    instant the policy is rebuilt from its state (a restarted controller: its caches start
    empty)."""

    name: ClassVar[str] = "side-by-side"

    def __init__(self, make: Callable[[], Policy], reference: Policy, seed: int) -> None:
        super().__init__(reference.context)
        self.make = make
        self.policy = make()
        self.reference = reference
        self.seed = seed
        self.decisions = 0
        self.instants = 0
        self.now = -1.0
        self.limit = 40  # instants followed

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        if view.now != self.now:
            self.now, self.instants = view.now, self.instants + 1
            if self.instants > self.limit:
                raise _Enough
            if self.instants % 7 == 3:
                state = json.loads(json.dumps(self.policy.state_dict()))
                self.policy = self.make()
                self.policy.load_state_dict(state)
        self.decisions += 1
        ours = self.policy.decide(view, event, _rng(self.seed, self.decisions))
        theirs = self.reference.decide(view, event, _rng(self.seed, self.decisions))
        where = f"seed {self.seed}, decision {self.decisions}, {event}"
        assert ours == theirs, f"{where}: {ours} != {theirs}"
        assert self.policy.state_dict() == self.reference.state_dict(), where
        if event.kind is EventKind.SLOT_FREE:
            self.needed_checkpoints(view)
        return ours

    def wants_fit(self, step: int) -> bool:
        assert self.policy.wants_fit(step) == self.reference.wants_fit(step)
        return self.policy.wants_fit(step)

    def needed_checkpoints(self, view: StudyView) -> set[int] | None:
        needed = self.policy.needed_checkpoints(view)
        assert needed == self.reference.needed_checkpoints(view)
        return needed

    def state_dict(self) -> dict[str, Any]:
        return self.policy.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.policy.load_state_dict(state)
        self.reference.load_state_dict(state)

    def state_changes(self) -> dict[str, Any]:
        return self.policy.state_changes()


def _rng(seed: int, index: int) -> np.random.Generator:
    return np.random.default_rng([seed, index])


def _walk(name: str, options: Mapping[str, Any], seed: int) -> int:
    """Drive the policy and its reference through one random study of the conformance kit (the
    real scheduling core, which gives an unchanged trial the same view object, so caches keyed
    by it are hit); return the decisions."""
    new_type, reference_type = REFERENCES[name]
    study = RandomStudy.draw(seed, default_space())
    twin = wrapper_type(_SideBySide, new_type(study.context, new_type.Options(**options)))(
        lambda: new_type(study.context, new_type.Options(**options)),
        reference_type(study.context, new_type.Options(**options)),
        seed,
    )
    with contextlib.suppress(_Enough):
        study.simulator(twin).run()
    return twin.decisions


@pytest.mark.parametrize(
    ("name", "options"), CASES, ids=[f"{n}-{'-'.join(map(str, o.values()))}" for n, o in CASES]
)
def test_a_policy_decides_as_its_straightforward_reference(
    name: str, options: dict[str, Any]
) -> None:
    decisions = sum(_walk(name, options, seed) for seed in range(12))
    assert decisions > 100


# -- large studies -----------------------------------------------------------------------------


def _curve(rng: np.random.Generator, first: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    steps = np.arange(first, first + length, dtype=np.int64)
    values = np.round(rng.uniform(0, 1) + 0.3 * rng.standard_normal(length), 2)  # ties
    values[rng.random(length) < 0.05] = np.nan
    if length > 3 and rng.random() < 0.05:  # resumed from an earlier checkpoint: steps repeat
        steps = np.concatenate([steps[: length // 2], steps[length // 4 : length // 4 + 2]])
        values = values[: len(steps)]
    return steps, values


def _median_study(seed: int, n: int, max_steps: int) -> Iterator[StudyView]:
    """Views of a study of ``n`` trials moving on: running trials append points, some trials
    end, are retried (their curve cut back), new ones arrive."""
    rng = np.random.default_rng(seed)
    statuses = [S.RUNNING, S.QUEUED, S.SUSPENDED, S.COMPLETED, S.TERMINATED, S.FAILED]
    trials: dict[int, TrialView] = {}
    for tid in range(n):
        status = statuses[int(rng.choice(6, p=[0.3, 0.1, 0.1, 0.2, 0.25, 0.05]))]
        length = 0 if status is S.QUEUED else int(rng.integers(0, max_steps + 1))
        steps, values = _curve(rng, 1, length)
        trials[tid] = TrialView(
            tid, status, {"id": tid}, step=int(length), steps=steps, values=values
        )
    for _ in range(12):
        yield StudyView(
            metric="acc",
            mode="max" if seed % 2 else "min",
            max_steps=max_steps,
            boundary=1,
            now=0.0,
            trials=dict(trials),
            free_slots=0,
            total_slots=8,
            trials_remaining=int(rng.integers(0, 2)),
        )
        for tid, trial in list(trials.items()):
            u = rng.random()
            if trial.status is S.RUNNING and u < 0.6:
                more = int(rng.integers(1, 4))
                first = int(trial.steps[-1]) + 1 if len(trial.steps) else 1
                steps, values = _curve(rng, first, more)
                trials[tid] = dataclasses.replace(
                    trial,
                    steps=np.concatenate([trial.steps, steps]),
                    values=np.concatenate([trial.values, values]),
                    status=S.COMPLETED if rng.random() < 0.05 else S.RUNNING,
                )
            elif u < 0.03:  # retried from an earlier checkpoint: the curve is cut back
                keep = int(rng.integers(0, len(trial.steps) + 1))
                trials[tid] = dataclasses.replace(
                    trial, steps=trial.steps[:keep], values=trial.values[:keep], status=S.RUNNING
                )
            elif u < 0.05:
                trials[tid] = dataclasses.replace(trial, status=S.SUSPENDED)
        for _ in range(int(rng.integers(0, 4))):
            tid = len(trials)
            trials[tid] = TrialView(tid, S.QUEUED, {"id": tid})


@pytest.mark.parametrize("seed", range(6))
def test_the_median_rule_matches_the_reference_on_large_changing_studies(seed: int) -> None:
    options = MedianOptions(
        grace_period=[0, 1, 3][seed % 3], min_samples_required=[1, 3, 20][seed % 3]
    )
    policy, reference = (
        MedianStoppingPolicy(context(), options),
        ReferenceMedian(context(), options),
    )
    rng = np.random.default_rng(seed)
    checked = 0
    for index, view in enumerate(_median_study(seed, n=150, max_steps=25)):
        if index == 6:  # restart: the index is made again from the view
            policy = MedianStoppingPolicy(context(), options)
            policy.load_state_dict(json.loads(json.dumps(reference.state_dict())))
        ids = sorted(view.trials)
        for _ in range(60):
            tid = ids[int(rng.integers(len(ids)))]
            step = int(rng.integers(0, 28))
            event = Event.boundary(tid, step)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                expected = list(reference.decide(view, event, rng).actions)
            assert list(policy.decide(view, event, rng).actions) == expected, (
                seed,
                index,
                tid,
                step,
            )
            checked += expected[0].kind.value != "continue"
    assert checked > 0


def _pbt_view(seed: int, population: int, generations: int, *, max_steps: int) -> StudyView:
    """A PBT study: generations of ``population`` trials, the older ones initiated, the last
    ones partly ended, a few failed or running."""
    rng = np.random.default_rng(seed)
    trials: dict[int, TrialView] = {}
    by_generation: list[list[int]] = []
    for g in range(generations):
        ids: list[int] = []
        for i in range(population):
            tid = len(trials)
            last = g == generations - 1
            status = S.COMPLETED
            u = rng.random()
            if u < 0.05:
                status = S.FAILED
            elif last and u < 0.4:
                status = S.RUNNING
            end = min(3 * (g + 1), max_steps)
            value = float(np.round(rng.random(), 1))  # ties
            initiator = by_generation[-1][i] if g else None
            trials[tid] = TrialView(
                tid,
                status,
                {"x": float(rng.random())},
                step=end,
                steps=np.array([end]),
                values=np.array([value]),
                checkpoint_step=end if rng.random() < 0.9 else None,
                end_step=end,
                generation=g,
                initiator=initiator if (initiator is not None and g < generations - 1) else None,
                last_metrics={"acc": value},
            )
            ids.append(tid)
        by_generation.append(ids)
    return StudyView(
        metric="acc",
        mode="max",
        max_steps=max_steps,
        boundary=1,
        now=0.0,
        trials=trials,
        free_slots=0,
        total_slots=4,
        trials_remaining=int(rng.integers(0, 3)) if seed % 2 else None,
        space=default_space() if seed % 3 == 0 else None,
    )


@pytest.mark.parametrize("seed", range(8))
def test_pbt_suggests_as_the_reference_for_many_free_slots(seed: int) -> None:
    options = PbtOptions(
        population_size=12,
        steps_per_generation=3,
        budget=[True, False, None][seed % 3],
        opponent_generations=1 + seed % 3,
        comparison="pareto" if seed % 4 == 3 else "lexicographic",
    )
    view = _pbt_view(seed, 12, 9, max_steps=[30, 100][seed % 2])
    policy, reference = PbtPolicy(context(), options), ReferencePbt(context(), options)
    for free in (1, 7, 40):
        event = Event.slot_free(free)
        ours = list(policy.decide(view, event, _rng(seed, free)).actions)
        assert ours == list(reference.decide(view, event, _rng(seed, free)).actions)
    assert policy.needed_checkpoints(view) == reference.needed_checkpoints(view)
    assert any(a.initiator is not None for a in ours)
