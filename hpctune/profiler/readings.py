"""What a finished short study measured (:mod:`hpctune.profiler.measure` runs them): per size,
seconds per step, segment start, warm-up, checkpoint save and load, SCALE and INIT; for the
study of rung decisions, SYNC. Read from the short study's journal and files."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from hpctune.elastic.experiment import experiment_from_study
from hpctune.elastic.measured import study_decisions, study_latencies
from hpctune.errors import HpctuneError
from hpctune.journal.entities import SegmentRecord
from hpctune.journal.reader import read_study
from hpctune.journal.state import StudyRecord
from hpctune.profiler.from_traces import read_steps
from hpctune.spec import StudySpec
from hpctune.study.states import TrialStatus
from hpctune.wire.eventlog import read_events
from hpctune.wire.layout import StudyPaths
from hpctune.wire.protocol import EV_CHECKPOINT

if TYPE_CHECKING:
    from hpctune.journal.reader import StudyReader


LOAD_REPEATS = 3


class ShortStudyFailed(HpctuneError):
    """A short study's trial did not complete (exit 1): the message names its error and log."""

    exit_code = 1


@dataclass(frozen=True)
class SizeRun:
    """What one short study measured.

    Attributes:
        devices: Devices of its worker (``ctx.devices``).
        directory: Its study directory.
        steps: Seconds per step (samples).
        segment_start: Seconds from a segment's start to its first step (set-up).
        checkpoint_save: Seconds of each ``ctx.save_checkpoint``.
        checkpoint_load: Seconds of each timed ``torch.load`` of a kept checkpoint.
        queue_wait: SCALE samples of its worker.
        startup: INIT samples of its worker.
        first_start: Per worker, its first segment's start to first report less one steady
            step (the segment start and the warm-up).
        warmup: Per worker with a later segment, its first segment's ``first_start`` less
            the later segments' mean start.
        segment_gap: Seconds from a worker's segment's end to its next segment's start.
    """

    devices: int
    directory: Path
    steps: tuple[float, ...]
    segment_start: tuple[float, ...]
    checkpoint_save: tuple[float, ...]
    checkpoint_load: tuple[float, ...]
    queue_wait: tuple[float, ...]
    startup: tuple[float, ...]
    first_start: tuple[float, ...] = ()
    warmup: tuple[float, ...] = ()
    segment_gap: tuple[float, ...] = ()


@dataclass(frozen=True)
class SyncRun:
    """What the short study of rung decisions measured.

    Attributes:
        directory: Its study directory.
        decision: SYNC samples (one per rung decided).
        queue_wait: SCALE samples of its worker.
        startup: INIT samples of its worker.
    """

    directory: Path
    decision: tuple[float, ...]
    queue_wait: tuple[float, ...]
    startup: tuple[float, ...]


def read_size(directory: Path, devices: int) -> SizeRun:
    """What a finished short study measured.

    Raises:
        ShortStudyFailed: Its trial did not complete (naming the reason and the trial's log).
    """
    study = read_study(directory)
    paths = StudyPaths.of(directory)
    _refuse_unfinished(
        study,
        directory,
        (TrialStatus.COMPLETED,),
        f"the short study at {devices} device(s) per trial ({directory})",
        "fix the training function (run `hpctune launch` on the study.toml to try it)",
    )
    steps, _ = read_steps(directory)
    median = float(np.median(steps))
    setup: dict[int, float] = {}  # segment id -> its start to first report less a step
    saves: list[float] = []
    kept: list[Path] = []
    for trial in study.trials:
        curve = study.curve(trial.trial_id)
        for segment_id in trial.segments:
            seg = study.record.segments[segment_id]
            later = [
                (s, t)
                for s, t in zip(curve.steps.tolist(), curve.times.tolist(), strict=True)
                if s > seg.start_step
            ]
            if seg.started_time is not None and later:
                step, t = later[0]
                excess = t - seg.started_time - (step - seg.start_step) * median
                setup[segment_id] = max(excess, 0.0)
            for record in read_events(paths.event_file(segment_id)).records:
                if record.get("kind") != EV_CHECKPOINT:
                    continue
                if isinstance(record.get("seconds"), int | float):
                    saves.append(float(record["seconds"]))
                path = directory / str(record.get("path", ""))
                if path.is_file():
                    kept.append(path)
    loads = [s for path in kept for _ in range(LOAD_REPEATS) for s in _load_seconds(path)]
    queue, startup = study_latencies(study.record)
    mean_load = float(np.mean(loads)) if loads else 0.0
    firsts, laters, gaps = worker_segments(study.record, setup)
    later_mean = float(np.mean(laters)) if laters else 0.0
    return SizeRun(
        devices=devices,
        directory=directory,
        steps=steps,
        segment_start=tuple(s + mean_load for s in (laters or firsts)),
        checkpoint_save=tuple(saves),
        checkpoint_load=tuple(loads),
        queue_wait=queue,
        startup=startup,
        first_start=tuple(firsts),
        warmup=tuple(max(f - later_mean, 0.0) for f in firsts) if laters else (),
        segment_gap=tuple(gaps),
    )


def read_sync(spec: StudySpec) -> SyncRun:
    """What the finished short study of rung decisions (``spec``: :func:`sync_spec`)
    measured: SYNC per rung decided (:func:`~hpctune.profiler.from_traces.study_decisions`), and
    its worker's SCALE and INIT.

    Raises:
        ShortStudyFailed: A trial neither completed nor was stopped at a rung (naming the
            reason and the trial's log), or no rung was decided.
    """
    directory = spec.directory
    study = read_study(directory)
    _refuse_unfinished(
        study,
        directory,
        (TrialStatus.COMPLETED, TrialStatus.TERMINATED),  # terminated: dropped at a rung
        f"the short study of rung decisions (SYNC, {directory})",
        "fix the training function (it must resume from ctx.start_step: run `hpctune launch` "
        'on a study.toml with [policy] name = "sha" to try it), or give SYNC with --decision '
        "SECONDS",
    )
    decisions = study_decisions(study.record, experiment_from_study(spec))
    if not decisions:
        raise ShortStudyFailed(
            f"the short study of rung decisions (SYNC, {directory}) finished without deciding "
            "a rung; give SYNC with --decision SECONDS"
        )
    queue, startup = study_latencies(study.record)
    return SyncRun(directory=directory, decision=decisions, queue_wait=queue, startup=startup)


def _refuse_unfinished(
    study: StudyReader, directory: Path, ended: tuple[TrialStatus, ...], what: str, fix: str
) -> None:
    """Raise :class:`ShortStudyFailed` for a trial of the short study ``study`` (in
    ``directory``) that did not end as ``ended`` allows (a failed one first), naming ``what``
    ran, the trial's log and ``fix``."""
    unfinished = [t for t in study.trials if t.status not in ended]
    unfinished.sort(key=lambda t: t.status is not TrialStatus.FAILED)  # a failure first
    for trial in unfinished[:1]:
        err = StudyPaths.of(directory).trial_output(trial.trial_id, "err")
        raise ShortStudyFailed(
            f"{what} did not finish: trial {trial.trial_id} is {trial.status.value}"
            f"{': ' + trial.reason if trial.reason else ''}; see {err} and {fix}"
        )


def worker_segments(
    record: StudyRecord, setup: Mapping[int, float]
) -> tuple[list[float], list[float], list[float]]:
    """Per worker, in the order its segments started: the ``setup`` of its first segment, of
    its later ones, and the gaps from a segment's end to the worker's next one's start."""
    firsts: list[float] = []
    laters: list[float] = []
    gaps: list[float] = []
    by_worker: dict[str, list[SegmentRecord]] = {}
    for seg in record.segments.values():
        if seg.started_time is not None:
            by_worker.setdefault(seg.worker_id, []).append(seg)
    for segments in by_worker.values():
        segments.sort(key=lambda s: s.started_time or 0.0)
        for i, seg in enumerate(segments):
            if seg.segment_id in setup:
                (laters if i else firsts).append(setup[seg.segment_id])
            if i and segments[i - 1].ended_time is not None and seg.started_time is not None:
                gaps.append(max(seg.started_time - (segments[i - 1].ended_time or 0.0), 0.0))
    return firsts, laters, gaps


def _load_seconds(path: Path) -> tuple[float, ...]:
    """Seconds of one ``torch.load`` of ``path`` as ``ctx.load_checkpoint`` does it; none for
    a checkpoint that ``weights_only=True`` refuses (it is never unpickled here)."""
    import pickle

    import torch

    began = time.perf_counter()
    try:
        torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError):
        return ()
    return (time.perf_counter() - began,)


__all__ = [
    "LOAD_REPEATS",
    "ShortStudyFailed",
    "SizeRun",
    "SyncRun",
    "read_size",
    "read_sync",
    "worker_segments",
]
