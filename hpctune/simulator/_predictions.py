"""Learning-curve predictions for the simulator: one fit per (configuration, points), kept.

A prediction depends only on the configuration's first ``n`` values, the horizon and the fit
options, not on the policy, the slots or the configuration order, so every simulated run over
a trace shares them. They are fitted on demand (or all at once with :meth:`prefetch`, in a
process pool) and can be kept in a JSON-lines file, so a benchmark pays for them once.

In the simulator a prediction is available at the boundary where it is asked for (the fit
takes no simulated time); the controller runs fits beside training, so its predictions may lag
one boundary behind.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Protocol

from hpctune.curves import CurveFitter, CurvePrediction, CurveRequest, FitOptions
from hpctune.policies import Policy
from hpctune.simulator.traces import Trace
from hpctune.study.seeding import component_seed


class Predictions(Protocol):
    """Where the simulator's curve fits get their answers: :class:`PredictionCache` (fitted on
    the trace), or any source of predictions (the conformance kit's are made up)."""

    def get(self, config: int, n: int, x_max: int) -> CurvePrediction:
        """The prediction of configuration ``config`` from its first ``n`` values."""


class PredictionCache:
    """Predictions of a trace's configurations.

    Args:
        trace: The trace.
        bounds: ``(low, high)`` of the metric (the curve model normalises by it); ``None``: the
            trace's ``metric_bounds``, else (0, 1).
        options: Fit options (budget, families, ...).
        seed: Seeds the fits (each (configuration, n) gets its own derived seed).
        path: A JSON-lines file to read predictions from and append new ones to.
    """

    def __init__(
        self,
        trace: Trace,
        *,
        bounds: tuple[float, float] | None = None,
        options: FitOptions | None = None,
        seed: int = 0,
        path: str | Path | None = None,
    ) -> None:
        self.trace = trace
        self.bounds = bounds or trace.metric_bounds or (0.0, 1.0)
        self.options = options or FitOptions()
        self.seed = seed
        self.path = Path(path) if path is not None else None
        self._key = self._options_key()
        self._cache: dict[tuple[int, int, int], CurvePrediction] = {}
        self.fits = 0
        if self.path is not None and self.path.exists():
            self._read()

    def _options_key(self) -> str:
        text = json.dumps(
            {
                "options": asdict(self.options),
                "bounds": list(self.bounds),
                "seed": self.seed,
                "curves": _digest(self.trace),
            },
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def _read(self) -> None:
        if self.path is None:
            return
        for line in self.path.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a torn last line of an interrupted run
            if row.get("key") == self._key:
                pair = (int(row["config"]), int(row["n"]), int(row["x_max"]))
                self._cache[pair] = CurvePrediction.from_dict(row["prediction"])

    def _request(self, config: int, n: int, x_max: int) -> CurveRequest:
        return CurveRequest(
            key=(config, n, x_max),
            y=tuple(float(v) for v in self.trace.curves[config, :n]),
            x_max=x_max,
            bounds=self.bounds,
            mode=self.trace.mode,
            seed=component_seed(self.seed, f"curve/{config}/{n}"),
        )

    def get(self, config: int, n: int, x_max: int) -> CurvePrediction:
        """The prediction of configuration ``config`` from its first ``n`` values."""
        pair = (config, n, x_max)
        if pair not in self._cache:
            self.prefetch([(config, n)], x_max, workers=0)
        return self._cache[pair]

    def prefetch(self, pairs: Iterable[tuple[int, int]], x_max: int, workers: int = 0) -> int:
        """Fit every (configuration, n) not known yet; return how many were fitted."""
        missing = sorted({(c, n) for c, n in pairs if (c, n, x_max) not in self._cache})
        if not missing:
            return 0
        requests = [self._request(c, n, x_max) for c, n in missing]
        results = CurveFitter(workers=workers, options=self.options).fit(requests)
        lines = []
        for (c, n), request in zip(missing, requests, strict=True):
            prediction = results[request.key]
            self._cache[(c, n, x_max)] = prediction
            lines.append(
                json.dumps(
                    {
                        "key": self._key,
                        "config": c,
                        "n": n,
                        "x_max": x_max,
                        "prediction": prediction.to_dict(),
                    }
                )
            )
        self.fits += len(missing)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a") as f:
                f.write("\n".join(lines) + "\n")
        return len(missing)


def _digest(trace: Trace) -> str:
    """A short digest of a trace's curves (which predictions depend on)."""
    return hashlib.sha256(trace.curves.tobytes()).hexdigest()[:16]


def prefetch_for(
    cache: PredictionCache, policies: Iterable[Policy], max_steps: int, workers: int = 0
) -> int:
    """Fit, in a pool of ``workers`` processes, every prediction these policies will ask for.

    A policy asks for a fit of every configuration at each step where ``wants_fit`` holds (the
    simulator asks at boundaries; a superset is harmless). Returns how many fits were run.
    """
    steps = sorted(
        {
            n
            for policy in policies
            if policy.traits.wants_predictions
            for n in range(3, max_steps)
            if policy.wants_fit(n)
        }
    )
    pairs = [(c, n) for c in range(cache.trace.num_configs) for n in steps]
    return cache.prefetch(pairs, max_steps, workers=workers)
