"""The simulator's Python API: one run (:func:`simulate`), many (:func:`run_many`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpctune.policies import OptionError, Policy, StudyContext, make_policy
from hpctune.policies.generators import Generator, make_generator
from hpctune.simulator._config import SimulatorConfig, SimulatorError
from hpctune.simulator._engine import Simulator, simulation_context
from hpctune.simulator._predictions import PredictionCache
from hpctune.simulator._results import SimulationResult, summarize
from hpctune.simulator.nearest import trace_space
from hpctune.simulator.traces import Trace
from hpctune.study.seeding import component_seed

PolicySpec = str | tuple[str, Mapping[str, Any]]


def _trace(trace: Trace | str | Path) -> Trace:
    return trace if isinstance(trace, Trace) else Trace.load(trace)


def _config(config: SimulatorConfig | None, settings: Mapping[str, Any]) -> SimulatorConfig:
    config = config or SimulatorConfig()
    names = {f.name for f in dataclasses.fields(SimulatorConfig)}
    unknown = sorted(set(settings) - names)
    if unknown:
        raise SimulatorError(
            f"unknown simulator setting(s) {', '.join(unknown)}; valid: {', '.join(sorted(names))}"
        )
    return dataclasses.replace(config, **settings) if settings else config


def build_policy(name: str, options: Mapping[str, Any] | None, context: StudyContext) -> Policy:
    """Build a policy of the registry for ``context`` (:func:`simulation_context`), turning
    option errors into :class:`SimulatorError`."""
    try:
        return make_policy(name, dict(options or {}), context)
    except OptionError as exc:
        where = "policy" if exc.key == "name" else f"policy {name}: option {exc.key}"
        raise SimulatorError(f"{where}: {exc.message}") from None


def build_generator(
    trace: Trace, name: str, options: Mapping[str, Any] | None, seed: int
) -> Generator:
    """Build generator ``name`` on the trace's search space, seeded for run ``seed``.

    Raises:
        SimulatorError: The name or an option is invalid.
    """
    try:
        return make_generator(
            name, dict(options or {}), trace_space(trace), component_seed(seed, "generator")
        )
    except OptionError as exc:
        where = "generator" if exc.key == "name" else f"generator {name}: option {exc.key}"
        raise SimulatorError(f"{where}: {exc.message}") from None


def simulate(
    trace: Trace | str | Path,
    policy: str | Policy,
    options: Mapping[str, Any] | None = None,
    slots: int = 4,
    seed: int = 0,
    *,
    config: SimulatorConfig | None = None,
    order: Sequence[int] | None = None,
    predictions: PredictionCache | None = None,
    generator: str | None = None,
    generator_options: Mapping[str, Any] | None = None,
    **settings: Any,
) -> SimulationResult:
    """Replay ``trace`` on ``slots`` slots under ``policy`` and return the result.

    Args:
        trace: A :class:`Trace` or the path of a trace file.
        policy: A policy name (:func:`hpctune.policies.make_policy`: hpctune's own, another
            package's, or ``MODULE:CLASS``), or a policy object.
        options: The policy's options (as under ``[policy]``), with a name.
        slots: Workers at once.
        seed: The configuration order and the policy's random numbers.
        config: Costs and study settings.
        order: An explicit configuration order (trace rows), instead of a seeded permutation.
        predictions: Learning-curve predictions shared between runs (POP, EarlyTerm).
        generator: A generator name (``"tpe"``, ``"gp"``, ...) that proposes configurations,
            each answered with the nearest unused configuration of the trace; ``None``: the
            seeded configuration order (random search).
        generator_options: The generator's options (as under ``[generator]``).
        **settings: Fields of :class:`SimulatorConfig` overriding ``config`` (e.g.
            ``target=0.98``, ``queue_wait=60``).

    Raises:
        SimulatorError: A setting, the policy or one of its options is invalid.
        TraceError: The trace file cannot be read.
    """
    data = _trace(trace)
    config = _config(config, settings)
    if isinstance(policy, str):
        policy = build_policy(policy, options, simulation_context(data, config))
    elif options:
        raise SimulatorError("options are given with a policy object; build it with them")
    built = None
    if generator is not None:
        built = build_generator(data, generator, generator_options, seed)
    sim = Simulator(
        data,
        policy,
        slots=slots,
        seed=seed,
        config=config,
        order=None if order is None else list(order),
        predictions=predictions,
        generator=built,
    )
    return sim.run()


def label(name: str, options: Mapping[str, Any]) -> str:
    """A policy's name with its options, e.g. ``asha(reduction_factor=3)``."""
    if not options:
        return name
    return f"{name}({', '.join(f'{k}={v}' for k, v in sorted(options.items()))})"


@dataclass(frozen=True)
class ManyResult:
    """Runs of several policies over the same configuration orders, and their summaries.

    Attributes:
        runs: The results by policy label, one per seed.
        summary: Medians and quartiles by policy label (:func:`summarize`).
        target: The target value.
        budget: The time at which ``best_value_at_budget`` is taken, if any.
    """

    runs: Mapping[str, list[SimulationResult]]
    summary: Mapping[str, dict[str, Any]]
    target: float
    budget: float | None = None


def run_many(
    trace: Trace | str | Path,
    policies: Sequence[PolicySpec],
    slots: int = 4,
    seeds: int | Sequence[int] = 8,
    *,
    config: SimulatorConfig | None = None,
    budget: float | None = None,
    predictions: PredictionCache | None = None,
    generator: str | None = None,
    generator_options: Mapping[str, Any] | None = None,
    on_run: Callable[[str, int], None] | None = None,
    **settings: Any,
) -> ManyResult:
    """Simulate every policy over the same ``seeds`` (configuration orders).

    Args:
        trace: A :class:`Trace` or the path of a trace file.
        policies: Names, or ``(name, options)`` pairs.
        slots: Workers at once.
        seeds: How many seeds (0..K-1), or the seeds themselves.
        config: Costs and study settings.
        budget: Also summarise the best value found by this time (seconds).
        predictions: Learning-curve predictions shared by every run (fitted once per
            configuration and number of points); ``None``: one cache for this call.
        generator: A generator proposing configurations (see :func:`simulate`).
        generator_options: Its options.
        on_run: Called with the policy's label and the seed after each run (progress).
        **settings: Fields of :class:`SimulatorConfig` overriding ``config``.
    """
    data = _trace(trace)
    cfg = _config(config, settings)
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    if not seed_list:
        raise SimulatorError("seeds must name at least one seed")
    runs: dict[str, list[SimulationResult]] = {}
    if predictions is None:
        predictions = PredictionCache(data, bounds=cfg.metric_bounds(data))
    for spec in policies:
        name, options = (spec, {}) if isinstance(spec, str) else (spec[0], dict(spec[1]))
        build_policy(name, options, simulation_context(data, cfg))  # fail before running
        if generator is not None:
            build_generator(data, generator, generator_options, 0)
        key = label(name, options)
        while key in runs:
            key += "'"
        runs[key] = []
        for seed in seed_list:
            runs[key].append(
                simulate(
                    data,
                    name,
                    options,
                    slots,
                    seed,
                    config=cfg,
                    predictions=predictions,
                    generator=generator,
                    generator_options=generator_options,
                )
            )
            if on_run is not None:
                on_run(key, seed)
    target = next(iter(runs.values()))[0].target if runs else float("nan")
    summary = {key: summarize(results, budget) for key, results in runs.items()}
    return ManyResult(runs, summary, target, budget)


__all__ = [
    "ManyResult",
    "PolicySpec",
    "build_generator",
    "build_policy",
    "label",
    "run_many",
    "simulate",
]
