"""A workload's profile: the latencies the elastic simulator samples (RubberBand §4.1 and §5).

* **TRAIN**: steady seconds per step at 1, 2, 4 ... devices per trial (data-parallel, the global
  batch size fixed), interpolated in between; the seconds a segment takes to begin (model and
  data built, checkpoint loaded) before its first step; the gap between two segments of one
  worker (the controller seeing the end, the worker taking the next assignment); and the
  *crowding*: how much slower a step is when ``n`` workers train at once (1 where devices are
  not shared; more on a node whose CPUs the workers share).
* **SCALE**: seconds a new worker of a given size waits in the queue (Slurm's pending time).
* **INIT**: seconds from a worker's start to its first segment (imports, start-up), alone and
  with ``n`` workers starting at once, plus the *warm-up*: what a worker's first segment takes
  beyond a later one's (imports and initialisation on first use, e.g. a first ``import torch``),
  so that the steady step time keeps none of it.
* **SYNC**: seconds from a rung's last segment end to the next segment's start (the decision).

A quantity measured alone and with ``n`` workers at once (INIT, warm-up, crowding) is read at
any ``n`` by :func:`at_together`: linear in ``n`` between the measured counts, extrapolated from
the last two beyond them (never below the largest measured).

Every quantity is a tuple of measured samples; the simulator draws from them. Pure data: no I/O
but :meth:`Profile.save` / :meth:`Profile.load` (JSON).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np

from hpctune.elastic.experiment import PlanningError
from hpctune.files import write_json_atomic

T = TypeVar("T")

FORMAT_VERSION = 2
PROFILE_FILE = "profile.json"


def _samples(values: Sequence[float], what: str) -> tuple[float, ...]:
    out = tuple(float(v) for v in values)
    if any(not (math.isfinite(v) and v >= 0) for v in out):
        raise PlanningError(f"profile: {what} must be finite numbers >= 0, but got {list(out)}")
    return out


def _by_size(
    data: Mapping[Any, Sequence[float]], what: str, low: int = 1
) -> dict[int, tuple[float, ...]]:
    out: dict[int, tuple[float, ...]] = {}
    for key, values in data.items():
        size = int(key)
        if size < low:
            raise PlanningError(f"profile: {what} has a size {key!r}; sizes must be >= {low}")
        out[size] = _samples(values, f"{what}[{size}]")
    return dict(sorted(out.items()))


def at_together(
    alone: Sequence[float], together: Mapping[int, Sequence[float]], n: int
) -> tuple[float, ...]:
    """Samples of a quantity measured ``alone`` (one worker) and ``together`` (``{n: samples}``
    with ``n`` workers at once) at ``n`` workers.

    A measured ``n`` gives its samples; another gives the samples of the nearest measured count
    below it scaled to a mean interpolated linearly in ``n`` (between two measured counts) or
    extrapolated from the last two (beyond the largest; never below the largest's mean).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, but got {n}")
    table: dict[int, tuple[float, ...]] = {1: tuple(alone) or (0.0,)}
    table.update({k: tuple(v) for k, v in together.items() if k > 1 and v})
    if n in table:
        return table[n]
    keys = sorted(table)
    means = {k: float(np.mean(table[k])) for k in keys}
    lower = max(k for k in keys if k < n)
    higher = [k for k in keys if k > n]
    if higher:
        h = min(higher)
        target = means[lower] + (means[h] - means[lower]) * (n - lower) / (h - lower)
    elif len(keys) >= 2:
        a, b = keys[-2], keys[-1]
        slope = max((means[b] - means[a]) / (b - a), 0.0)
        target = means[b] + slope * (n - b)
    else:
        return table[lower]
    base, mean = table[lower], means[lower]
    if mean > 0:
        return tuple(v * target / mean for v in base)
    return tuple(v + target for v in base)


@dataclass(frozen=True)
class Profile:
    """Measured latencies of one workload on one cluster.

    Attributes:
        step_seconds: Devices per trial -> steady seconds per step (samples); at least one size.
        segment_start: Seconds from a segment's start to its first step (checkpoint load,
            model and data set-up).
        startup: INIT: seconds from a worker's start to its first segment, one worker alone.
        queue_wait: SCALE: worker size (devices) -> seconds in the queue.
        decision: SYNC: seconds from a rung's last segment end to the next segment's start.
        checkpoint_save: Seconds of ``ctx.save_checkpoint`` (for information; in the steps).
        checkpoint_load: Seconds of ``ctx.load_checkpoint`` (for information; in
            ``segment_start``).
        device: What a device is: ``"gpu"``, or ``"cpu"`` where CPUs stand in for GPUs.
        source: Where the figures come from.
        startup_together: INIT with ``n`` workers starting at once: ``{n: samples}``, n >= 2.
        warmup: Seconds a worker's first segment takes beyond a later one's (one-off imports
            and initialisation), one worker alone; in the simulator part of INIT.
        warmup_together: The warm-up with ``n`` workers starting at once, n >= 2.
        segment_gap: Seconds from a worker's segment's end to the start of its next segment
            (not before a worker's first segment: INIT covers that).
        crowding: ``{n: samples}`` (n >= 2): seconds per step with ``n`` workers training at
            once over alone (1 when nothing is shared).
    """

    step_seconds: Mapping[int, tuple[float, ...]]
    segment_start: tuple[float, ...] = (0.0,)
    startup: tuple[float, ...] = (0.0,)
    queue_wait: Mapping[int, tuple[float, ...]] = field(default_factory=lambda: {1: (0.0,)})
    decision: tuple[float, ...] = (0.0,)
    checkpoint_save: tuple[float, ...] = ()
    checkpoint_load: tuple[float, ...] = ()
    device: str = "gpu"
    source: str = ""
    startup_together: Mapping[int, tuple[float, ...]] = field(default_factory=dict)
    warmup: tuple[float, ...] = (0.0,)
    warmup_together: Mapping[int, tuple[float, ...]] = field(default_factory=dict)
    segment_gap: tuple[float, ...] = (0.0,)
    crowding: Mapping[int, tuple[float, ...]] = field(default_factory=dict)
    # what the simulator asks again and again, by (quantity, devices or workers): the fields are
    # frozen, so each is computed once (planning runs thousands of simulations)
    _memo: dict[tuple[str, int], Any] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        steps = _by_size(self.step_seconds, "step_seconds")
        if not steps or any(not v for v in steps.values()):
            raise PlanningError(
                "profile: step_seconds needs samples for at least one size (devices per trial); "
                "make one with `hpctune profile`"
            )
        if any(np.mean(v) <= 0 for v in steps.values()):
            raise PlanningError("profile: the mean seconds per step must be > 0 at every size")
        object.__setattr__(self, "step_seconds", steps)
        waits = _by_size(self.queue_wait, "queue_wait") or {1: (0.0,)}
        object.__setattr__(self, "queue_wait", {k: v or (0.0,) for k, v in waits.items()})
        for name in ("segment_start", "startup", "decision", "warmup", "segment_gap"):
            values = _samples(getattr(self, name), name)
            object.__setattr__(self, name, values or (0.0,))
        for name in ("startup_together", "warmup_together", "crowding"):
            table = _by_size(getattr(self, name), name, low=2)
            object.__setattr__(self, name, {k: v for k, v in table.items() if v})
        if any(np.mean(v) <= 0 for v in self.crowding.values()):
            raise PlanningError("profile: crowding factors must have a mean > 0")
        for name in ("checkpoint_save", "checkpoint_load"):
            object.__setattr__(self, name, _samples(getattr(self, name), name))

    # -- steps ------------------------------------------------------------------------------

    @property
    def sizes(self) -> tuple[int, ...]:
        """The measured devices-per-trial sizes, ascending."""
        return tuple(self.step_seconds)

    @property
    def max_devices(self) -> int:
        """The largest measured size: the planner gives no trial more."""
        return self.sizes[-1]

    def _memoized(self, what: str, n: int, compute: Callable[[], T]) -> T:
        """``compute()``, kept under ``(what, n)`` (the profile's fields never change)."""
        key = (what, n)
        if key not in self._memo:
            self._memo[key] = compute()
        return cast("T", self._memo[key])

    def step_mean(self, devices: int) -> float:
        """Mean seconds per step at ``devices`` devices per trial.

        Between measured sizes the log of the time is interpolated linearly in the log of the
        size; below the smallest, perfect scaling from it is assumed (an upper bound for any
        sublinear workload); above the largest, no further speed-up.
        """
        return self._memoized(
            "step_mean",
            devices,
            lambda: float(
                np.exp(self._interpolate(devices, [math.log(self._mean(g)) for g in self.sizes]))
            ),
        )

    def step_sd(self, devices: int) -> float:
        """Standard deviation of the seconds per step at ``devices`` (its coefficient of
        variation interpolated as :meth:`step_mean` interpolates the mean)."""

        def compute() -> float:
            cvs = [np.std(self.step_seconds[g]) / self._mean(g) for g in self.sizes]
            cv = float(np.interp(np.log(devices), np.log(self.sizes), cvs))
            return cv * self.step_mean(devices)

        return self._memoized("step_sd", devices, compute)

    def speedup(self, devices: int) -> float:
        """Throughput at ``devices`` relative to one device."""
        return self.step_mean(1) / self.step_mean(devices)

    def _mean(self, devices: int) -> float:
        return float(np.mean(self.step_seconds[devices]))

    def _interpolate(self, devices: int, log_values: Sequence[float]) -> float:
        if devices < 1:
            raise ValueError(f"devices must be >= 1, but got {devices}")
        sizes = self.sizes
        x = math.log(devices)
        if devices < sizes[0]:
            return float(log_values[0] + math.log(sizes[0]) - x)
        return float(np.interp(x, np.log(sizes), log_values))

    # -- sampling ---------------------------------------------------------------------------

    def startup_at(self, together: int) -> tuple[float, ...]:
        """INIT samples with ``together`` workers starting at once (:func:`at_together`)."""
        return self._memoized(
            "startup", together, lambda: at_together(self.startup, self.startup_together, together)
        )

    def warmup_at(self, together: int) -> tuple[float, ...]:
        """Warm-up samples with ``together`` workers starting at once."""
        return self._memoized(
            "warmup", together, lambda: at_together(self.warmup, self.warmup_together, together)
        )

    def crowding_at(self, together: int) -> float:
        """The mean slow-down of a step with ``together`` workers training at once."""
        return self._memoized(
            "crowding",
            together,
            lambda: float(np.mean(at_together((1.0,), self.crowding, together))),
        )

    def init_mean(self, together: int) -> float:
        """Mean INIT node: start-up plus warm-up with ``together`` workers starting at once."""
        return float(np.mean(self.startup_at(together)) + np.mean(self.warmup_at(together)))

    def sample_init(self, together: int, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` draws of an INIT node: start-up plus warm-up with ``together`` at once."""
        return draw(self.startup_at(together), rng, n) + draw(self.warmup_at(together), rng, n)

    def train_mean(
        self,
        devices: int,
        steps: int,
        *,
        begins: bool = True,
        together: int = 1,
        gap: bool = False,
    ) -> float:
        """Mean TRAIN node (:meth:`sample_train`)."""
        out = steps * self.step_mean(devices) * self.crowding_at(together)
        if begins:
            out += self._memoized("segment_start", 0, lambda: float(np.mean(self.segment_start)))
        if gap:
            out += self._memoized("segment_gap", 0, lambda: float(np.mean(self.segment_gap)))
        return out

    def sample_train(
        self,
        devices: int,
        steps: int,
        rng: np.random.Generator,
        n: int,
        *,
        begins: bool = True,
        together: int = 1,
        gap: bool = False,
    ) -> np.ndarray:
        """``n`` draws of a TRAIN node: the gap since the worker's previous segment (``gap``),
        a segment's beginning (unless ``begins`` is False: a segment already running) plus
        ``steps`` steps, each slowed by the crowding of ``together`` workers at once.

        The sum of ``steps`` steps is drawn as a normal with mean ``steps * mean`` and standard
        deviation ``sqrt(steps) * sd`` (independent steps, the central limit), cut at zero.
        """
        crowd = self.crowding_at(together)
        mean, sd = self.step_mean(devices) * crowd, self.step_sd(devices) * crowd
        body = np.full(n, steps * mean)
        if sd > 0:
            body = np.maximum(body + math.sqrt(steps) * sd * rng.standard_normal(n), 0.0)
        if begins:
            body = body + draw(self.segment_start, rng, n)
        if gap:
            body = body + draw(self.segment_gap, rng, n)
        return body

    def sample_queue(self, devices: int, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` draws of SCALE for a worker of ``devices`` devices: the samples of the
        smallest measured worker size at least as large (else the largest measured)."""
        return draw(self.queue_wait[self.queue_size(devices)], rng, n)

    def queue_size(self, devices: int) -> int:
        """The measured worker size whose queue wait stands for ``devices``."""
        larger = [s for s in self.queue_wait if s >= devices]
        return min(larger) if larger else max(self.queue_wait)

    # -- files ------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON form (:meth:`from_dict` turns it back)."""
        return {
            "version": FORMAT_VERSION,
            "device": self.device,
            "source": self.source,
            "step_seconds": {str(k): list(v) for k, v in self.step_seconds.items()},
            "segment_start": list(self.segment_start),
            "startup": list(self.startup),
            "queue_wait": {str(k): list(v) for k, v in self.queue_wait.items()},
            "decision": list(self.decision),
            "checkpoint_save": list(self.checkpoint_save),
            "checkpoint_load": list(self.checkpoint_load),
            "startup_together": {str(k): list(v) for k, v in self.startup_together.items()},
            "warmup": list(self.warmup),
            "warmup_together": {str(k): list(v) for k, v in self.warmup_together.items()},
            "segment_gap": list(self.segment_gap),
            "crowding": {str(k): list(v) for k, v in self.crowding.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "profile") -> Profile:
        """Rebuild from :meth:`to_dict`.

        Raises:
            PlanningError: A field is missing or malformed (naming ``where``).
        """
        try:
            version = int(data.get("version", FORMAT_VERSION))
            if version > FORMAT_VERSION:
                raise PlanningError(
                    f"{where}: profile format {version} is newer than this hpctune reads "
                    f"({FORMAT_VERSION}); upgrade hpctune"
                )
            return cls(
                step_seconds=data["step_seconds"],
                segment_start=data.get("segment_start", (0.0,)),
                startup=data.get("startup", (0.0,)),
                queue_wait=data.get("queue_wait", {1: (0.0,)}),
                decision=data.get("decision", (0.0,)),
                checkpoint_save=data.get("checkpoint_save", ()),
                checkpoint_load=data.get("checkpoint_load", ()),
                device=str(data.get("device", "gpu")),
                source=str(data.get("source", "")),
                startup_together=data.get("startup_together", {}),
                warmup=data.get("warmup", (0.0,)),
                warmup_together=data.get("warmup_together", {}),
                segment_gap=data.get("segment_gap", (0.0,)),
                crowding=data.get("crowding", {}),
            )
        except PlanningError as exc:
            raise PlanningError(f"{where}: {exc}") from None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise PlanningError(
                f"{where}: not a profile ({type(exc).__name__}: {exc}); make one with "
                "`hpctune profile`"
            ) from None

    def save(self, path: Path) -> Path:
        """Write the profile as JSON (atomically); return the path."""
        write_json_atomic(Path(path), self.to_dict())
        return Path(path)

    @classmethod
    def load(cls, path: Path) -> Profile:
        """Read a profile file, or the ``profile.json`` of a profile's study directory.

        Raises:
            PlanningError: The file is missing or is not a profile.
        """
        path = Path(path)
        if path.is_dir():
            path = path / PROFILE_FILE
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise PlanningError(
                f"profile {path} does not exist; measure one with `hpctune profile "
                "study.toml` (it writes the study directory's profile.json), or make one from "
                "a trace with `hpctune profile --steps 1=TRACE --out profile.json` and give it "
                "as --profile"
            ) from None
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise PlanningError(f"profile {path} cannot be read: {exc}") from None
        if not isinstance(data, dict):
            raise PlanningError(f"profile {path}: expected a JSON object")
        return cls.from_dict(data, str(path))

    @classmethod
    def scaling(
        cls,
        step_seconds: float,
        speedups: Mapping[int, float],
        *,
        cv: float = 0.0,
        samples: int = 64,
        **latencies: Any,
    ) -> Profile:
        """A profile from a scaling curve: ``step_seconds`` at one device and the throughput
        ``speedups`` at other sizes, each step normal with coefficient of variation ``cv``
        (``samples`` evenly spaced quantiles, so no random draw is involved). ``latencies``:
        the other fields (``queue_wait``, ``startup``, ...)."""
        from statistics import NormalDist

        quantiles = [(i + 0.5) / samples for i in range(samples)] if cv > 0 else [0.5]
        z = [NormalDist().inv_cdf(q) for q in quantiles]
        table = {1: 1.0, **{int(k): float(v) for k, v in speedups.items()}}
        steps = {
            g: tuple(max(step_seconds / s * (1 + cv * zi), 0.0) for zi in z)
            for g, s in sorted(table.items())
        }
        return cls(step_seconds=steps, **latencies)


def draw(samples: Sequence[float], rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` draws (with replacement) from measured ``samples``; one sample is a constant."""
    values = np.asarray(samples, dtype=float)
    if values.size <= 1:
        return np.full(n, float(values[0]) if values.size else 0.0)
    return values[rng.integers(0, values.size, n)]


__all__ = ["PROFILE_FILE", "Profile", "at_together", "draw"]
