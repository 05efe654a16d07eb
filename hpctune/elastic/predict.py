"""Predict a plan's completion time and cost by sampling its DAG (RubberBand §4.2, Algorithm 1).

Each sample draws every node's latency from the profile and takes the longest paths; the
completion time is the end of the last SYNC. The cost of a sample is what the plan holds (an
elastic plan: each worker's devices from the end of its SCALE to its last segment, or to the
SYNC when the next stage keeps it; a static plan: the pool from its start to the end) or uses
(devices in segments). Samples are drawn from a generator seeded by ``seed``, so a plan's
prediction is a pure function of its inputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from hpctune.elastic.allocation import Allocation
from hpctune.elastic.cost import CostModel
from hpctune.elastic.dag import Dag, NodeKind, critical_path, finish_times, to_dag
from hpctune.elastic.experiment import ExperimentSpec, Progress
from hpctune.elastic.profile import Profile, draw
from hpctune.study.seeding import index_rng


@dataclass(frozen=True)
class Spread:
    """A predicted quantity over the samples: mean, standard deviation, quantiles."""

    mean: float
    sd: float
    p10: float
    p50: float
    p90: float

    @classmethod
    def of(cls, values: np.ndarray) -> Spread:
        """Summarise samples."""
        q = np.quantile(values, [0.1, 0.5, 0.9])
        return cls(float(np.mean(values)), float(np.std(values)), *(float(x) for x in q))

    def to_dict(self) -> dict[str, float]:
        """JSON form."""
        return {
            "mean": self.mean,
            "sd": self.sd,
            "p10": self.p10,
            "p50": self.p50,
            "p90": self.p90,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Spread:
        """Rebuild from :meth:`to_dict`."""
        return cls(*(float(data[k]) for k in ("mean", "sd", "p10", "p50", "p90")))


@dataclass(frozen=True)
class Prediction:
    """What the simulator predicts for one plan.

    Attributes:
        time: Seconds from the start (of the study, with progress: elapsed included) to the
            end of the last stage.
        cost: Cost in the cost model's unit (with progress: spent included).
        device_hours_held: Mean device-hours held (without progress' spent).
        device_hours_used: Mean device-hours in segments (without progress' spent).
        critical: Seconds of each node type on the critical path at mean latencies.
        samples: How many samples.
    """

    time: Spread
    cost: Spread
    device_hours_held: float
    device_hours_used: float
    critical: Mapping[str, float]
    samples: int

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "time_s": self.time.to_dict(),
            "cost": self.cost.to_dict(),
            "device_hours_held": self.device_hours_held,
            "device_hours_used": self.device_hours_used,
            "critical_path_s": dict(self.critical),
            "samples": self.samples,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Prediction:
        """Rebuild from :meth:`to_dict`."""
        return cls(
            Spread.from_dict(data["time_s"]),
            Spread.from_dict(data["cost"]),
            float(data["device_hours_held"]),
            float(data["device_hours_used"]),
            {str(k): float(v) for k, v in data["critical_path_s"].items()},
            int(data["samples"]),
        )


def sample_latencies(dag: Dag, profile: Profile, rng: np.random.Generator, n: int) -> np.ndarray:
    """``[n, nodes]`` latencies drawn from the profile (Algorithm 1's ``sample_latency``)."""
    lat = np.empty((n, len(dag.nodes)))
    for v, node in enumerate(dag.nodes):
        if node.kind is NodeKind.SCALE:
            lat[:, v] = profile.sample_queue(node.devices, rng, n)
        elif node.kind is NodeKind.INIT:
            lat[:, v] = profile.sample_init(node.together, rng, n)
        elif node.kind is NodeKind.TRAIN:
            lat[:, v] = profile.sample_train(
                node.devices,
                node.steps,
                rng,
                n,
                begins=node.begins,
                together=node.together,
                gap=node.gap,
            )
        else:
            lat[:, v] = draw(profile.decision, rng, n)
    return lat


def mean_latencies(dag: Dag, profile: Profile) -> np.ndarray:
    """Every node's mean latency (for the critical path shown to users)."""
    out = np.empty(len(dag.nodes))
    for v, node in enumerate(dag.nodes):
        if node.kind is NodeKind.SCALE:
            out[v] = np.mean(profile.queue_wait[profile.queue_size(node.devices)])
        elif node.kind is NodeKind.INIT:
            out[v] = profile.init_mean(node.together)
        elif node.kind is NodeKind.TRAIN:
            out[v] = profile.train_mean(
                node.devices,
                node.steps,
                begins=node.begins,
                together=node.together,
                gap=node.gap,
            )
        else:
            out[v] = np.mean(profile.decision)
    return out


def held_seconds(dag: Dag, finish: np.ndarray) -> np.ndarray:
    """Device-seconds held in each sample (``finish``: [samples, nodes] end times)."""
    n = finish.shape[0]

    def at(node: int | None) -> np.ndarray:
        return np.zeros(n) if node is None else finish[:, node]

    if dag.pool is not None:
        devices, begin, end = dag.pool
        return devices * (finish[:, end] - at(begin))
    total = np.zeros(n)
    for hold in dag.holds:
        begins = sum((at(b) for b in hold.begins), np.zeros(n))
        ends = np.stack(
            [at(e if e is not None else b) for e, b in zip(hold.ends, hold.begins, strict=True)],
            axis=1,
        )
        if hold.kept:
            ends = np.sort(ends, axis=1)  # the last to finish are kept, held to the SYNC
            ends[:, ends.shape[1] - hold.kept :] = finish[:, hold.sync][:, None]
        total += hold.devices * (ends.sum(axis=1) - begins)
    return total


def used_seconds(dag: Dag, latencies: np.ndarray) -> np.ndarray:
    """Device-seconds in segments in each sample."""
    train = [v for v, node in enumerate(dag.nodes) if node.kind is NodeKind.TRAIN]
    devices = np.array([dag.nodes[v].devices for v in train], dtype=float)
    return latencies[:, train] @ devices if train else np.zeros(latencies.shape[0])


def simulate(
    spec: ExperimentSpec,
    allocation: Allocation,
    profile: Profile,
    cost: CostModel,
    *,
    samples: int = 64,
    seed: int = 0,
    progress: Progress | None = None,
) -> Prediction:
    """Predict the completion time and cost of running ``spec`` with ``allocation``.

    Args:
        spec: The stages.
        allocation: Their shapes (and the pool of a static plan).
        profile: The latencies to sample.
        cost: How device-seconds become cost.
        samples: How many samples (Algorithm 1's ``n``).
        seed: Seeds the draws; the same inputs give the same prediction.
        progress: Predict from here on (elapsed time and spent cost are added).
    """
    dag = to_dag(spec, allocation, progress)
    rng = index_rng(seed, 0)
    lat = sample_latencies(dag, profile, rng, samples)
    finish = finish_times(dag, lat)
    held = held_seconds(dag, finish)
    used = used_seconds(dag, lat)
    elapsed = progress.elapsed if progress is not None else 0.0
    spent = progress.spent if progress is not None else 0.0
    times = finish[:, dag.end] + elapsed
    costs = cost.of(held if cost.basis == "held" else used) + spent
    mean = mean_latencies(dag, profile)
    critical: dict[str, float] = {k.value: 0.0 for k in NodeKind}
    for v in critical_path(dag, mean):
        critical[dag.nodes[v].kind.value] += float(mean[v])
    return Prediction(
        time=Spread.of(times),
        cost=Spread.of(np.asarray(costs, dtype=float)),
        device_hours_held=float(np.mean(held)) / 3600.0,
        device_hours_used=float(np.mean(used)) / 3600.0,
        critical=critical,
        samples=samples,
    )


__all__ = [
    "Prediction",
    "Spread",
    "held_seconds",
    "mean_latencies",
    "sample_latencies",
    "simulate",
    "used_seconds",
]
