"""Policies compared on a trace (``hpctune simulate``): :func:`compare` runs them, and
:class:`Comparison` is the outcome as the documented JSON and as a table (``docs/traces.md``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from hpctune.curves import FitOptions
from hpctune.simulator._api import ManyResult, build_policy, run_many
from hpctune.simulator._config import SimulationOptions
from hpctune.simulator._engine import simulation_context
from hpctune.simulator._predictions import PredictionCache, prefetch_for
from hpctune.simulator._results import SimulationResult
from hpctune.simulator.traces import Trace

#: The ``format`` of :meth:`Comparison.to_dict`.
FORMAT = "hpctune.simulate/1"
# SimulatorConfig fields the JSON leaves out (shown elsewhere, or not JSON)
_NOT_IN_JSON = ("target", "stop_at_target", "max_time", "faults")


@dataclass(frozen=True)
class Comparison:
    """Runs of every policy of :attr:`options` over the same seeds, on :attr:`trace`.

    Attributes:
        options: What was compared.
        trace: The trace it ran on.
        result: The runs and their medians and quartiles per policy label.
    """

    options: SimulationOptions
    trace: Trace
    result: ManyResult

    def first_run(self, policy: str) -> SimulationResult | None:
        """The first run of the policy named ``policy`` (any options), or ``None``."""
        runs = (r for results in self.result.runs.values() for r in results)
        return next((r for r in runs if r.policy == policy), None)

    def to_dict(self, *, timeline: bool = False) -> dict[str, Any]:
        """The documented JSON (``format`` :data:`FORMAT`); ``timeline``: each run's
        segments, workers, incumbents and decisions too."""
        options, trace, many = self.options, self.trace, self.result
        generator = None
        if options.generator is not None:
            generator = {"name": options.generator, "options": dict(options.generator_options)}
        config = {k: v for k, v in vars(options.config).items() if k not in _NOT_IN_JSON}
        policies = [
            {
                "label": key,
                "policy": runs[0].policy,
                "options": dict(runs[0].options),
                "summary": many.summary[key],
                "runs": [r.to_dict(timeline=timeline, budget=many.budget) for r in runs],
            }
            for key, runs in many.runs.items()
        ]
        return {
            "format": FORMAT,
            "trace": {
                "path": str(options.trace),
                "configs": trace.num_configs,
                "epochs": trace.num_epochs,
                "metric": trace.metric,
                "mode": trace.mode,
                "random_level": None if math.isnan(trace.random_level) else trace.random_level,
            },
            "target": many.target,
            "generator": generator,
            "slots": options.slots,
            "seeds": list(range(options.seeds)),
            "budget": many.budget,
            "config": config,
            "policies": policies,
        }

    def lines(self) -> list[str]:
        """The comparison as text: the trace, the costs, then medians (quartiles) per policy."""
        options, trace, config = self.options, self.trace, self.options.config
        lines = [
            f"trace {options.trace}: {trace.num_configs} configurations x {trace.num_epochs} "
            f"epochs, {trace.metric} ({trace.mode}), target {self.result.target:.6g}"
        ]
        if options.generator is not None:
            lines.append(
                f"generator {options.generator}: each proposal answered with the nearest unused "
                "configuration of the trace (docs/traces.md)"
            )
        lines.append(
            f"{options.slots} slots, {options.seeds} configuration orders; costs (s): queue "
            f"{config.queue_wait:g}, start-up {config.startup:g}, suspend "
            f"{config.suspend_cost:g}, resume {config.resume_cost:g}, checkpoint "
            f"{config.checkpoint_cost:g}, curve fit {config.fit_seconds:g}"
        )
        lines.append("medians (quartiles q25-q75):")
        return lines + self._table()

    def _table(self) -> list[str]:
        budget = self.result.budget
        header = ["policy", "reached", "time to target s", "GPU-h to target", "GPU-h", "best"]
        header += ["started", "terminated", "suspended"]
        if budget is not None:
            header.append(f"best by {budget:g} s")
        rows = [header]
        for key, summary in self.result.summary.items():
            row = [
                key,
                f"{summary['reached']}/{summary['runs']}",
                _quartiles(summary["time_to_target"]),
                _quartiles(summary["gpu_hours_to_target"]),
                _quartiles(summary["gpu_hours"]),
                _number(summary["best_value"]["median"], 4),
                _number(summary["trials_started"]["median"]),
                _number(summary["trials_terminated"]["median"]),
                _number(summary["trials_suspended"]["median"]),
            ]
            if budget is not None:
                row.append(_number(summary["best_value_at_budget"]["median"], 4))
            rows.append(row)
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        return [
            "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
        ]


def _number(value: float | None, digits: int = 3) -> str:
    return "never" if value is None else f"{value:.{digits}g}"


def _quartiles(q: dict[str, float | None], digits: int = 3) -> str:
    return (
        f"{_number(q['median'], digits)} ({_number(q['q25'], digits)}-{_number(q['q75'], digits)})"
    )


def compare(
    options: SimulationOptions, *, on_run: Callable[[str, int], None] | None = None
) -> Comparison:
    """Run every policy of ``options`` over its seeds on its trace.

    Learning-curve predictions (POP, EarlyTerm) are fitted once per (configuration, points)
    before the runs, in ``options.fit_workers`` processes for Domhan's model, and shared by
    every run (and kept in ``options.predictions`` when given).

    Args:
        options: What to compare.
        on_run: Called with the policy's label and the seed after each run (progress).

    Raises:
        SimulatorError: An option, a setting, a policy or one of its options is invalid.
        TraceError: The trace file cannot be read.
    """
    options.check()
    trace = Trace.load(options.trace)
    config = options.config
    cache = PredictionCache(
        trace,
        bounds=config.metric_bounds(trace),
        options=FitOptions(model=cast(Any, options.curve_model)),
        path=options.predictions,
    )
    context = simulation_context(trace, config)
    built = [
        build_policy(name, policy_options, context) for name, policy_options in options.policies
    ]
    max_steps = config.max_steps or trace.num_epochs
    prefetch_for(cache, built, max_steps, workers=options.fit_workers)
    many = run_many(
        trace,
        options.policies,
        options.slots,
        options.seeds,
        config=config,
        budget=options.budget,
        predictions=cache,
        generator=options.generator,
        generator_options=options.generator_options,
        on_run=on_run,
    )
    return Comparison(options, trace, many)


__all__ = ["FORMAT", "Comparison", "compare"]
