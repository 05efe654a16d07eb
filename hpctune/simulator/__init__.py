"""The trace-driven simulator: policies replayed on recorded curves in simulated time.

HyperDrive's simulator (§7.1 of the paper) in hpctune's terms: a
:class:`~hpctune.simulator.traces.Trace`
is the workload, the policy is any :func:`hpctune.policies.make_policy` builds (hpctune's own,
another package's, ``MODULE:CLASS``), and the engine plays
the controller and the workers with their rules, so that what is measured here is what runs on
the cluster. See ``docs/traces.md``.

>>> from hpctune.simulator import simulate, run_many                 # doctest: +SKIP
>>> simulate("benchmarks/traces/digits.h5", "asha", slots=4).time_to_target  # doctest: +SKIP

:func:`compare` runs a whole comparison (what ``hpctune simulate`` prints) from one
:class:`SimulationOptions`.
"""

from __future__ import annotations

from hpctune.simulator._api import ManyResult, build_policy, label, run_many, simulate
from hpctune.simulator._comparison import Comparison, compare
from hpctune.simulator._config import (
    Faults,
    SimClock,
    SimulationOptions,
    SimulatorConfig,
    SimulatorError,
)
from hpctune.simulator._engine import Simulator, simulation_context
from hpctune.simulator._predictions import PredictionCache
from hpctune.simulator._results import (
    DecisionRecord,
    SegmentSpan,
    SimulationResult,
    TrialOutcome,
    WorkerSpan,
    quantiles,
    summarize,
)

__all__ = [
    "Comparison",
    "DecisionRecord",
    "Faults",
    "ManyResult",
    "PredictionCache",
    "SegmentSpan",
    "SimClock",
    "SimulationOptions",
    "SimulationResult",
    "Simulator",
    "SimulatorConfig",
    "SimulatorError",
    "TrialOutcome",
    "WorkerSpan",
    "build_policy",
    "compare",
    "label",
    "quantiles",
    "run_many",
    "simulate",
    "simulation_context",
    "summarize",
]
