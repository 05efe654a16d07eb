"""Traces: recorded learning curves and per-step durations, the simulator's workload.

A trace is one HDF5 file (format in ``docs/traces.md``) holding, for each of its configurations,
the study metric at every step (``curves``), the seconds each step took (``epoch_seconds``) and
the hyperparameters (``hparams``, JSON text). HyperDrive's trace generator (§7.1 of the paper)
records the same from live runs; :meth:`Trace.from_study` builds one from a finished study's
journal, and ``hpctune export-trace`` writes it.

>>> trace = Trace.load("benchmarks/traces/digits.h5")      # doctest: +SKIP
>>> trace.curves.shape                                      # doctest: +SKIP
(128, 30)
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from hpctune.errors import HpctuneError
from hpctune.journal.reader import read_study
from hpctune.study.states import Mode

FORMAT_VERSION = 1
DATASETS = ("curves", "epoch_seconds", "hparams")
ATTRS = ("metric", "mode", "random_level", "format_version")


class TraceError(HpctuneError):
    """A trace file is missing, unreadable or malformed (the message names file and dataset)."""

    exit_code = 2


@dataclass(frozen=True, eq=False)
class Trace:
    """Learning curves and step durations of a set of configurations.

    Attributes:
        curves: ``[configs, epochs]`` the metric after each step; NaN where a configuration did
            not run (after its end) or did not report the metric.
        epoch_seconds: ``[configs, epochs]`` seconds each step took; NaN where it did not run.
        hparams: The hyperparameters of each configuration.
        metric: The metric's name.
        mode: ``"max"`` or ``"min"``.
        random_level: The metric's value for a model that has learnt nothing (0.1 for 10
            classes); NaN if unknown.
        source: Free text: where the trace comes from.
        metric_bounds: ``(low, high)``: the metric's range (the study's ``metric_bounds``), or
            None if the trace does not say (learning-curve fits then assume ``(0, 1)``).
        search_space: The ``[search_space]`` table the configurations were drawn from (the
            simulator's nearest-configuration rule needs its ranges and log scales), or None
            (then :func:`hpctune.simulator.trace_space` infers one from the configurations).
    """

    curves: np.ndarray
    epoch_seconds: np.ndarray
    hparams: tuple[Mapping[str, Any], ...]
    metric: str
    mode: Mode
    random_level: float = math.nan
    source: str = ""
    metric_bounds: tuple[float, float] | None = None
    search_space: Mapping[str, Any] | None = None
    _where: str = field(default="trace", repr=False)

    def __post_init__(self) -> None:
        curves = np.asarray(self.curves, dtype=float)
        seconds = np.asarray(self.epoch_seconds, dtype=float)
        object.__setattr__(self, "curves", curves)
        object.__setattr__(self, "epoch_seconds", seconds)
        object.__setattr__(self, "hparams", tuple(dict(h) for h in self.hparams))
        where = self._where
        if curves.ndim != 2:
            raise TraceError(
                f"{where}: dataset 'curves' must be 2-D [configs, epochs], but has shape "
                f"{curves.shape}"
            )
        if curves.shape[0] < 1 or curves.shape[1] < 1:
            raise TraceError(
                f"{where}: dataset 'curves' must hold at least one configuration and one "
                f"epoch, but has shape {curves.shape}"
            )
        if seconds.shape != curves.shape:
            raise TraceError(
                f"{where}: dataset 'epoch_seconds' must have the shape of 'curves' "
                f"{curves.shape}, but has shape {seconds.shape}"
            )
        if len(self.hparams) != curves.shape[0]:
            raise TraceError(
                f"{where}: dataset 'hparams' must hold one entry per configuration "
                f"({curves.shape[0]}), but holds {len(self.hparams)}"
            )
        if np.any(seconds[np.isfinite(seconds)] < 0) or np.any(np.isinf(seconds)):
            raise TraceError(f"{where}: dataset 'epoch_seconds' must be finite and >= 0 or NaN")
        if self.mode not in ("max", "min"):
            raise TraceError(
                f"{where}: attribute 'mode' must be 'max' or 'min', not {self.mode!r}"
            )
        if not self.metric:
            raise TraceError(f"{where}: attribute 'metric' must be a non-empty string")

    # -- shape and summaries ------------------------------------------------------------------

    @property
    def num_configs(self) -> int:
        """How many configurations the trace holds."""
        return int(self.curves.shape[0])

    @property
    def num_epochs(self) -> int:
        """How many steps (epochs) a full run has."""
        return int(self.curves.shape[1])

    @property
    def sign(self) -> float:
        """+1 for ``max``, -1 for ``min``."""
        return 1.0 if self.mode == "max" else -1.0

    def lengths(self) -> np.ndarray:
        """Steps recorded per configuration (the run of finite ``epoch_seconds`` from step 1)."""
        finite = np.isfinite(self.epoch_seconds)
        ended = ~finite
        return np.where(ended.any(axis=1), ended.argmax(axis=1), self.num_epochs)

    def best_values(self) -> np.ndarray:
        """The best metric value of each configuration over its steps (NaN if it has none)."""
        signed = self.sign * self.curves
        has = ~np.isnan(signed).all(axis=1)
        best = np.full(self.num_configs, np.nan)
        best[has] = np.nanmax(signed[has], axis=1)
        return self.sign * best

    def default_target(self, quantile: float = 0.95) -> float:
        """The target the simulator uses when none is given.

        It is the ``quantile`` of the configurations' best values in the metric's direction
        (the value only the best 5 % reach, by default), so that which policy finds one of them
        first is what time-to-target measures.
        """
        best = self.best_values()
        best = best[np.isfinite(best)]
        if not len(best):
            raise TraceError(f"{self._where}: no configuration has a finite metric value")
        q = quantile if self.mode == "max" else 1.0 - quantile
        return float(np.quantile(best, q))

    def subset(self, indices: Sequence[int]) -> Trace:
        """The trace of the configurations ``indices`` (in that order)."""
        idx = np.asarray(list(indices), dtype=np.int64)
        return Trace(
            self.curves[idx],
            self.epoch_seconds[idx],
            tuple(self.hparams[i] for i in idx),
            self.metric,
            self.mode,
            self.random_level,
            self.source,
            self.metric_bounds,
            self.search_space,
        )

    # -- files --------------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write the trace as an HDF5 file (see ``docs/traces.md``); return the path."""
        import h5py

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        with h5py.File(tmp, "w") as f:
            for name, data in (("curves", self.curves), ("epoch_seconds", self.epoch_seconds)):
                f.create_dataset(name, data=data, compression="gzip", shuffle=True)
            text = [json.dumps(h, sort_keys=True) for h in self.hparams]
            f.create_dataset("hparams", data=text, dtype=h5py.string_dtype())
            f.attrs["metric"] = self.metric
            f.attrs["mode"] = self.mode
            f.attrs["random_level"] = float(self.random_level)
            f.attrs["format_version"] = FORMAT_VERSION
            f.attrs["source"] = self.source
            if self.metric_bounds is not None:
                f.attrs["metric_bounds"] = np.asarray(self.metric_bounds, dtype=float)
            if self.search_space is not None:
                f.attrs["search_space"] = json.dumps(self.search_space)
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Trace:
        """Read a trace file.

        Raises:
            TraceError: The file is missing or not HDF5, a dataset or attribute is missing, or
                shapes do not fit (the message names the file and the dataset).
        """
        import h5py

        path = Path(path)
        if not path.is_file():
            raise TraceError(f"trace file {path} does not exist")
        try:
            f = h5py.File(path, "r")
        except OSError as exc:
            raise TraceError(f"{path} is not a readable HDF5 trace file: {exc}") from None
        with f:
            for name in DATASETS:
                if name not in f or not isinstance(f[name], h5py.Dataset):
                    raise TraceError(
                        f"{path}: dataset '{name}' is missing; a trace needs the datasets "
                        f"{', '.join(DATASETS)} (docs/traces.md)"
                    )
            for name in ATTRS:
                if name not in f.attrs:
                    raise TraceError(f"{path}: attribute '{name}' is missing (docs/traces.md)")
            version = int(f.attrs["format_version"])
            if version > FORMAT_VERSION:
                raise TraceError(
                    f"{path}: format_version {version} is newer than this hpctune reads "
                    f"({FORMAT_VERSION}); upgrade hpctune"
                )
            curves = np.asarray(f["curves"][()], dtype=float)
            seconds = np.asarray(f["epoch_seconds"][()], dtype=float)
            raw = f["hparams"][()]
            hparams = []
            for i, item in enumerate(np.atleast_1d(raw)):
                text = item.decode("utf-8") if isinstance(item, bytes) else str(item)
                try:
                    value = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise TraceError(
                        f"{path}: dataset 'hparams' entry {i} is not JSON: {exc}"
                    ) from None
                if not isinstance(value, dict):
                    raise TraceError(
                        f"{path}: dataset 'hparams' entry {i} must be a JSON object, not "
                        f"{type(value).__name__}"
                    )
                hparams.append(value)
            attrs = {k: f.attrs[k] for k in f.attrs}
        return cls(
            curves,
            seconds,
            tuple(hparams),
            metric=_text(attrs["metric"]),
            mode=cast(Mode, _text(attrs["mode"])),  # checked in __post_init__, naming the file
            random_level=float(attrs["random_level"]),
            source=_text(attrs.get("source", "")),
            metric_bounds=_bounds(attrs.get("metric_bounds"), path),
            search_space=_space_attr(attrs.get("search_space"), path),
            _where=str(path),
        )

    @classmethod
    def from_study(cls, study_dir: str | Path, *, random_level: float = math.nan) -> Trace:
        """Build a trace from a study's journal: one configuration per trial, by trial id.

        Each row is the trial's curve of the study metric by step; each step's seconds are the
        time since the previous report of the same segment (a gap of k steps without the metric
        shares its time equally). The first step of a segment has no previous report: it gets
        the median of the trial's other step times, since the time from the segment's start
        also counts importing the training code and loading the checkpoint, which the simulator
        models apart (``startup``, ``resume_cost``); a trial with single-step segments only keeps
        the time from the segment's start. Trials that did not run to ``max_steps`` keep NaN
        after their last step.

        Args:
            study_dir: The study directory.
            random_level: The metric's value for a random model (NaN: unknown).

        Raises:
            JournalError: ``study_dir`` is not a study directory.
            TraceError: The study has no trials.
        """
        study = read_study(study_dir)
        max_steps = int(study.spec["max_steps"])
        trials = study.trials
        if not trials:
            raise TraceError(f"{study.directory}: the study has no trials to export")
        curves = np.full((len(trials), max_steps), np.nan)
        seconds = np.full((len(trials), max_steps), np.nan)
        for row, trial in enumerate(trials):
            curve = study.curve(trial.trial_id)
            segments = sorted(
                (
                    seg.started_time if seg.started_time is not None else seg.assigned_time,
                    seg.start_step,
                )
                for seg in (study.record.segments[s] for s in trial.segments)
            )
            prev: tuple[int, float] | None = None
            firsts: list[tuple[int, int, float]] = []  # first reports of segments
            for step, value, t in zip(
                curve.steps.tolist(), curve.values.tolist(), curve.times.tolist(), strict=True
            ):
                if not 1 <= step <= max_steps:
                    continue
                curves[row, step - 1] = value
                anchor = _segment_anchor(segments, step, t)
                if prev is not None and prev[0] >= anchor[0] and prev[1] >= anchor[1]:
                    seconds[row, prev[0] : step] = max(t - prev[1], 0.0) / (step - prev[0])
                else:
                    firsts.append((anchor[0], step, max(t - anchor[1], 0.0)))
                prev = (step, t)
            within = seconds[row][np.isfinite(seconds[row])]
            for start, step, elapsed in firsts:
                if start >= step:
                    continue
                typical = float(np.median(within)) if len(within) else elapsed / (step - start)
                seconds[row, start:step] = typical
        return cls(
            curves,
            seconds,
            tuple(t.params for t in trials),
            metric=study.metric,
            mode=study.mode,
            random_level=random_level,
            source=f"study {study.spec.get('name', '')} in {study.directory}",
            metric_bounds=_bounds(study.spec.get("metric_bounds"), study.directory),
            search_space=study.spec.get("space"),
            _where=str(study.directory),
        )


def _segment_anchor(segments: list[tuple[float, int]], step: int, t: float) -> tuple[int, float]:
    """The (start step, start time) of the segment that reported ``step`` at time ``t``."""
    anchor: tuple[int, float] | None = None
    for started, start_step in segments:
        if start_step < step and started <= t + 1e-6:
            anchor = (start_step, started)
    if anchor is None:
        return (step - 1, t)  # no segment known: no duration
    return anchor


def _bounds(value: Any, where: Path) -> tuple[float, float] | None:
    """The optional ``metric_bounds`` attribute: two finite numbers, low < high."""
    if value is None:
        return None
    data = np.asarray(value, dtype=float).ravel()
    if data.size != 2 or not np.all(np.isfinite(data)) or not data[0] < data[1]:
        raise TraceError(
            f"{where}: attribute 'metric_bounds' must be two finite numbers [low, high] with "
            f"low < high, not {value!r}"
        )
    return float(data[0]), float(data[1])


def _space_attr(value: Any, where: Path) -> dict[str, Any] | None:
    """The optional ``search_space`` attribute: a JSON object (a ``[search_space]`` table)."""
    if value is None:
        return None
    try:
        table = json.loads(_text(value))
    except json.JSONDecodeError as exc:
        raise TraceError(f"{where}: attribute 'search_space' is not JSON: {exc}") from None
    if not isinstance(table, dict):
        raise TraceError(f"{where}: attribute 'search_space' must be a JSON object")
    return table


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


__all__ = ["FORMAT_VERSION", "Trace", "TraceError"]
