"""POP and EarlyTerm in the simulator, with real learning-curve fits on a real trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpctune.simulator import PredictionCache, run_many, simulate, simulation_context
from hpctune.simulator.plots import plot_split
from hpctune.simulator.traces import Trace
from hpctune.study.states import TrialStatus
from tests.conftest import REPO

# 10 digits configurations: 9 that learn (final accuracy 0.80-0.98) and one that does not (0.19)
CONFIGS = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]


@pytest.fixture(scope="module")
def trace() -> Trace:
    return Trace.load(REPO / "benchmarks" / "traces" / "digits.h5").subset(CONFIGS)


@pytest.fixture(scope="module")
def cache(trace: Trace, tmp_path_factory: pytest.TempPathFactory) -> PredictionCache:
    path = tmp_path_factory.mktemp("predictions") / "digits.jsonl"
    cache = PredictionCache(trace, path=path)
    pairs = [(c, n) for c in range(trace.num_configs) for n in (10, 20)]
    cache.prefetch(pairs, trace.num_epochs, workers=2)
    return cache


@pytest.mark.slow
def test_pop_kills_the_flat_trial_and_reaches_the_target(
    trace: Trace, cache: PredictionCache
) -> None:
    result = simulate(
        trace,
        "pop",
        {"boundary": 10, "target": 0.97},
        slots=2,
        seed=0,
        predictions=cache,
        target=0.97,
    )
    flat = next(t for t in result.trials if t.config == 9)
    assert flat.status is TrialStatus.TERMINATED
    assert flat.step == 10  # at its first boundary
    assert flat.reason.startswith("poor:")
    assert result.time_to_target is not None
    assert result.trials_suspended > 0  # opportunistic trials yielded their slots
    assert any(state["s_promising"] > 0 for _, state in result.policy_states)
    assert cache.fits == 20  # every fit was prefetched: none made during the runs


@pytest.mark.slow
def test_predictions_are_kept_between_runs(
    trace: Trace, cache: PredictionCache, tmp_path: Path
) -> None:
    again = PredictionCache(trace, path=cache.path)  # read back from the file
    pairs = [(c, n) for c in range(trace.num_configs) for n in (10, 20)]
    assert again.prefetch(pairs, trace.num_epochs) == 0
    first = simulate(trace, "earlyterm", {"boundary": 10}, slots=2, seed=1, predictions=cache)
    second = simulate(trace, "earlyterm", {"boundary": 10}, slots=2, seed=1, predictions=again)
    assert [(t.trial, t.status, t.step) for t in first.trials] == [
        (t.trial, t.status, t.step) for t in second.trials
    ]
    many = run_many(
        trace,
        ["default", ("pop", {"boundary": 10})],
        slots=2,
        seeds=2,
        predictions=cache,
        target=0.97,
    )
    pop_run = many.runs["pop(boundary=10)"][0]
    out = plot_split(pop_run, tmp_path / "split.png")
    assert out.stat().st_size > 1000
    with pytest.raises(ValueError, match="POP only"):
        plot_split(many.runs["default"][0], tmp_path / "x.png")


def test_run_many_reports_each_run_and_the_progress_bar_draws_it(trace: Trace) -> None:
    import io

    from rich.console import Console

    from hpctune.analysis.progress_bar import run_progress

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    seen: list[tuple[str, int]] = []
    with run_progress(4, console=console) as on_run:

        def record(label: str, seed: int) -> None:
            seen.append((label, seed))
            on_run(label, seed)

        run_many(
            trace, ["default", ("earlyterm", {"boundary": 10})], slots=2, seeds=2, on_run=record
        )
    assert seen == [
        ("default", 0),
        ("default", 1),
        ("earlyterm(boundary=10)", 0),
        ("earlyterm(boundary=10)", 1),
    ]
    assert "simulating" in out.getvalue()
    assert "4/4" in out.getvalue()
    # not a terminal (a pipe, --json): nothing is drawn
    quiet = io.StringIO()
    with run_progress(1, console=Console(file=quiet, force_terminal=False)) as on_run:
        on_run("default", 0)
    assert quiet.getvalue() == ""


def test_pop_and_earlyterm_decide_the_same_without_their_per_view_memos(trace: Trace) -> None:
    from hpctune.policies.earlyterm import EarlyTermOptions, EarlyTermPolicy
    from hpctune.policies.pop import PopOptions, PopPolicy

    class Forgetful(PopPolicy):
        def decide(self, view, event, rng):  # type: ignore[no-untyped-def]
            self._best_memo, self._split_memo = None, None
            self._seconds_memo.clear()
            self._trial_best.clear()
            return super().decide(view, event, rng)

    class ForgetfulEarlyTerm(EarlyTermPolicy):
        def decide(self, view, event, rng):  # type: ignore[no-untyped-def]
            self._best_memo = None
            self._trial_best.clear()
            return super().decide(view, event, rng)

    context = simulation_context(trace)
    for seed in (0, 1):
        for fresh, remembering in (
            (
                Forgetful(context, PopOptions(boundary=5)),
                PopPolicy(context, PopOptions(boundary=5)),
            ),
            (
                ForgetfulEarlyTerm(context, EarlyTermOptions(boundary=5)),
                EarlyTermPolicy(context, EarlyTermOptions(boundary=5)),
            ),
        ):
            a = simulate(trace, fresh, slots=3, seed=seed)
            b = simulate(trace, remembering, slots=3, seed=seed)
            assert [(t.trial, t.status, t.step, t.reason) for t in a.trials] == [
                (t.trial, t.status, t.step, t.reason) for t in b.trials
            ]
            assert a.decisions == b.decisions
