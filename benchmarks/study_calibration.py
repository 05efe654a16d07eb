"""Calibration of the learning-curve predictions a policy sees in a study, with and without
``[curves] recalibrate``.

    nice -n 19 python benchmarks/study_calibration.py [--policy pop] [--slots 8] [--seeds 10]
        [--only digits-cnn digits] [--json]

``benchmarks/curves_eval.py`` measures predictions cut at fixed points of complete curves, and
its ``amortised+recal*`` methods recalibrate them with the PITs of other curves' *final* values.
In a study those are not there when they matter (the simulated studies of
``benchmarks/policies.py`` reach the target before any trial reaches ``max_steps``), so the
study recalibrates with the PITs of its trials' *latest* values
(:class:`hpctune.curves.calibration.StudyCalibration`). This script measures what that gives:
each trace of ``benchmarks/traces/`` is simulated (``hpctune.simulator``, the controller's own
code) under ``--policy`` at ``--slots``, the peers' configuration orders (seed k), until the
target (``Trace.default_target``), once per ``recalibrate`` setting. Every prediction the policy
is handed (at its ``prediction`` events) is scored against the trace's final value of its
trial's configuration: the PIT (:func:`hpctune.curves.calibration.pit`) of the final value,
and from it the share inside the central 50 % and 90 % intervals (calibrated: 0.5 and 0.9).
The model's own prediction of the same curve and points (``none``) is scored beside it, on the
same predictions.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from hpctune.curves.calibration import pit
from hpctune.curves.predict import CurvePrediction
from hpctune.policies import Event, EventKind, Policy, PolicyDecision, StudyView
from hpctune.simulator import (
    PredictionCache,
    Simulator,
    SimulatorConfig,
    build_policy,
    simulation_context,
)
from hpctune.simulator.traces import Trace

REPO = Path(__file__).resolve().parent.parent
TRACES = REPO / "benchmarks" / "traces"
SETTINGS = ("none", "spread", "full")


def _coverage(pits: list[float]) -> dict[str, Any]:
    z = np.asarray([p for p in pits if math.isfinite(p)], dtype=float)
    if z.size == 0:
        return {"count": 0, "cov50": None, "cov90": None}
    return {
        "count": int(z.size),
        "cov50": round(float(np.mean((z >= 0.25) & (z <= 0.75))), 3),
        "cov90": round(float(np.mean((z >= 0.05) & (z <= 0.95))), 3),
    }


def record_predictions(policy: Policy) -> list[tuple[int, CurvePrediction]]:
    """The (trial, prediction) the policy is handed at each of its prediction events, from now
    on (its ``decide`` is wrapped)."""
    seen: list[tuple[int, CurvePrediction]] = []
    decide = policy.decide

    def recording(view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        if event.kind is EventKind.PREDICTION and event.trial_id is not None:
            seen.append((event.trial_id, view.predictions[event.trial_id]))
        return decide(view, event, rng)

    policy.decide = recording  # type: ignore[method-assign]
    return seen


def measure(
    trace: Trace,
    policy: str,
    slots: int,
    seed: int,
    recalibrate: str,
    boundary: int,
    cache: PredictionCache | None = None,
) -> tuple[list[float], list[float], float | None]:
    """One simulated study: PITs of the final values under the predictions the policy saw and
    under the model's own ones, and the time to target. ``cache``: the trace's predictions,
    shared between runs (``None``: a new one)."""
    target = trace.default_target()
    config = SimulatorConfig(target=target, stop_at_target=True, recalibrate=recalibrate)
    options: dict[str, Any] = {"boundary": boundary} if policy in ("pop", "earlyterm") else {}
    if policy == "pop":
        options["target"] = target
    built = build_policy(policy, options, simulation_context(trace, config))
    seen = record_predictions(built)
    if cache is None:
        cache = PredictionCache(trace, bounds=config.metric_bounds(trace))
    order = [int(i) for i in np.random.default_rng(seed).permutation(trace.num_configs)]
    sim = Simulator(
        trace, built, slots=slots, seed=seed, config=config, order=order, predictions=cache
    )
    result = sim.run()
    x_max = trace.num_epochs
    given, own = [], []
    for trial_id, prediction in seen:
        row = sim.rows.row(sim.record, trial_id)
        final = float(trace.curves[row, x_max - 1])
        if prediction.unknown or not math.isfinite(final) or prediction.x_max != x_max:
            continue
        given.append(pit(prediction, x_max, final))
        own.append(pit(cache.get(row, prediction.n, x_max), x_max, final))
    return given, own, result.time_to_target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", type=Path, default=TRACES)
    parser.add_argument("--only", nargs="+", default=None, help="trace names (file stems)")
    parser.add_argument("--policy", default="pop")
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--boundary", type=int, default=5, help="POP, EarlyTerm")
    parser.add_argument("--json", action="store_true", help="print only one JSON object")
    args = parser.parse_args()
    paths = sorted(args.traces.glob("*.h5"))
    if args.only:
        paths = [p for p in paths if p.stem in set(args.only)]
    out: dict[str, Any] = {"policy": args.policy, "slots": args.slots, "seeds": args.seeds}
    for path in paths:
        trace = Trace.load(path)
        cache = PredictionCache(trace, bounds=SimulatorConfig().metric_bounds(trace))
        row: dict[str, Any] = {}
        for setting in SETTINGS:
            given: list[float] = []
            own: list[float] = []
            times: list[float] = []
            for seed in range(args.seeds):
                g, o, t = measure(
                    trace, args.policy, args.slots, seed, setting, args.boundary, cache
                )
                given += g
                own += o
                times.append(math.inf if t is None else t)
            row[setting] = {
                "seen": _coverage(given),
                "model": _coverage(own),
                "median_time_to_target": round(float(np.median(times)), 3),
            }
            if not args.json:
                print(path.stem, setting, json.dumps(row[setting]), flush=True)
        out[path.stem] = row
    print(json.dumps(out))


if __name__ == "__main__":
    main()
