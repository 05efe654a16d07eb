"""Measure a profile by running the user's study briefly at each size (RubberBand §5 "Planning").

``hpctune profile study.toml --sizes 1,2,4 --steps 5`` runs, per size ``g``, a short study of
the spec's own training function: one worker of ``g`` devices (``ctx.devices == g``), the
generator's first configuration (the same at every size: the generator is seeded), ``steps``
steps, the ``default`` policy (no decisions), ``max_retries = 0`` and ``fail_fast``. Locally
the worker gets ``g`` CPUs, which stand in for GPUs; on Slurm it gets ``g`` GPUs (and the
spec's CPUs per GPU) when the spec gives workers GPUs, else ``g`` CPUs. The short studies are
ordinary study directories under ``<study dir>/profile/size-<g>/``; from their journals and
event files come:

* TRAIN: steady seconds per step (:func:`hpctune.profiler.from_traces.read_steps`, as for a
  finished study: a segment's first step gets the median of the others); the segment start:
  the seconds from a segment's start to its first report less one step (model and data
  set-up), from the worker's later segments, plus the checkpoint load; and the gap between two
  segments of the worker (one's end to the next one's start). A short study runs three
  trials, one after the other on its one worker, so that a worker's first segment can be told
  from its later ones;
* the warm-up: what the worker's first segment took beyond the later ones' start (imports and
  initialisation on first use: a first ``import torch``, say), which the simulator counts in
  INIT, so that neither the steady step time nor the segment start keep it.
  Segment start, gap and warm-up are the medians over every size's segments (one sample
  each): robust to a segment slowed by another process on the node;
* checkpoint save: the seconds ``ctx.save_checkpoint`` took (its event lines' ``seconds``);
* checkpoint load: ``torch.load`` of each kept checkpoint, as ``ctx.load_checkpoint`` does it,
  timed in this process (a short study runs one segment per trial and never loads one);
* SCALE and INIT: :func:`hpctune.profiler.from_traces.study_latencies`, SCALE per worker size.

For each ``N`` of ``together`` (``hpctune profile --together 2,4``; default: the spec's
``slots``) one more short study, ``<study dir>/profile/together-N/``, starts ``N`` workers of
the smallest size at once, one trial each: INIT and warm-up with ``N`` workers starting
together (they share the nodes' CPUs and file system), and the *crowding*: its steps' seconds
over those of one worker alone.

SYNC (the rung decision): the ``default`` policy decides nothing, so one more short study,
``<study dir>/profile/sync/``, runs the ``sha`` policy on one worker of the smallest size:
:data:`SYNC_TRIALS` trials in brackets of two, η = 2, rungs at 1 and 2 steps (six steps in
all; a study of ``max_steps`` 1 has no rung to decide and skips it). Its SYNC samples, one per
bracket, are :func:`hpctune.profiler.from_traces.study_decisions` of its journal, as a running
study measures them: a rung's last segment end to the next rung's first segment start (the
controller deciding, the promoted trial assigned and started). Its worker's SCALE and INIT
are samples too. ``hpctune profile --decision S`` skips it and takes ``S``.
"""

from __future__ import annotations

import dataclasses
import io
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from hpctune.backends import Backend
from hpctune.controller.launch import create_study, run_local
from hpctune.curves.options import CurvesSpec
from hpctune.elastic.experiment import PlanningError, experiment_from_study
from hpctune.elastic.measured import study_decisions, study_latencies
from hpctune.elastic.profile import Profile
from hpctune.errors import HpctuneError, Interrupted
from hpctune.journal.entities import SegmentRecord
from hpctune.journal.reader import read_study
from hpctune.journal.state import StudyRecord
from hpctune.policies.generators import make_generator
from hpctune.profiler.from_traces import read_steps
from hpctune.spec import ComponentSpec, ResourcesSpec, StudySpec
from hpctune.stagetree.options import StagesSpec
from hpctune.study.seeding import component_seed
from hpctune.study.states import TrialStatus
from hpctune.wire.eventlog import read_events
from hpctune.wire.layout import StudyPaths
from hpctune.wire.lease import LeaseHeld, rival
from hpctune.wire.protocol import EV_CHECKPOINT

if TYPE_CHECKING:
    from hpctune.journal.reader import StudyReader

DEFAULT_SIZES = (1, 2, 4)
DEFAULT_STEPS = 5
MAX_SIZE = 1024
LOAD_REPEATS = 3
SYNC_TRIALS = 4  # two brackets of two trials: two rung decisions
SYNC_POLICY = ComponentSpec(
    "sha", {"reduction_factor": 2, "grace_period": 1, "max_t": 2, "bracket_size": 2}
)


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


def parse_sizes(text: str, option: str = "--sizes") -> tuple[int, ...]:
    """``"1,2,4"`` as ascending distinct sizes (the message names ``option``).

    Raises:
        PlanningError: A size is not an integer from 1 to :data:`MAX_SIZE`.
    """
    sizes = set()
    for part in text.split(","):
        item = part.strip()
        try:
            size = int(item)
        except ValueError:
            size = 0
        if not 1 <= size <= MAX_SIZE:
            raise PlanningError(
                f"{option} {text!r}: {item!r} is not a count; give whole numbers from 1 "
                f"to {MAX_SIZE} separated by commas, e.g. {option} 1,2,4"
            )
        sizes.add(size)
    return tuple(sorted(sizes))


def profile_root(spec: StudySpec) -> Path:
    """Where the short studies of ``spec``'s profile go (``<study dir>/profile/``)."""
    return StudyPaths(spec.directory).profile_runs


def size_spec(
    spec: StudySpec, devices: int, steps: int, *, cluster: bool = False, together: int = 0
) -> StudySpec:
    """The short study that measures ``spec``'s workload at ``devices`` devices per trial: three
    trials one after the other on one worker; with ``together = N``, ``N`` trials on ``N``
    workers at once."""
    res = spec.resources
    slots = max(together, 1)
    if cluster and res.gpus_per_worker:
        per_gpu = max(1, res.cpus_per_worker // res.gpus_per_worker)
        resources = ResourcesSpec(
            slots=slots, cpus_per_worker=per_gpu * devices, gpus_per_worker=devices
        )
    else:
        resources = ResourcesSpec(slots=slots, cpus_per_worker=devices, gpus_per_worker=0)
    max_steps = min(steps, spec.max_steps)

    name, folder = f"{spec.name}-profile-{devices}", f"size-{devices}"
    if together:
        name, folder = f"{spec.name}-profile-together-{together}", f"together-{together}"
    return dataclasses.replace(
        spec,
        name=name,
        directory=profile_root(spec) / folder,
        max_steps=max_steps,
        boundary=min(spec.boundary, max_steps),
        num_trials=together or generator_trials(spec, 3),
        fail_fast=True,
        max_retries=0,
        policy=ComponentSpec("default", {}),
        resources=resources,
        curves=CurvesSpec(),
        stages=StagesSpec(),
    )


def sync_spec(spec: StudySpec, devices: int, *, cluster: bool = False) -> StudySpec | None:
    """The short study that measures ``spec``'s rung decisions (SYNC): :data:`SYNC_TRIALS`
    trials (fewer for a smaller grid; a bracket of one trial decides its rung too) of
    :data:`SYNC_POLICY` (rungs at 1 and 2 steps) on one worker of ``devices`` devices;
    ``None`` when ``spec``'s ``max_steps`` is 1 (no rung to decide)."""
    if spec.max_steps < 2:
        return None
    return dataclasses.replace(
        size_spec(spec, devices, 2, cluster=cluster),
        name=f"{spec.name}-profile-sync",
        directory=profile_root(spec) / "sync",
        boundary=1,
        num_trials=generator_trials(spec, SYNC_TRIALS),
        policy=SYNC_POLICY,
    )


def generator_trials(spec: StudySpec, wanted: int) -> int:
    """``wanted``, or fewer when ``spec``'s generator has fewer configurations (a grid): a
    short study must not ask it for more."""
    seed = component_seed(spec.seed, "generator")
    size = make_generator(spec.generator.name, spec.generator.options, spec.space, seed).size()
    return wanted if size is None else max(1, min(wanted, size))


def device_kind(spec: StudySpec, *, cluster: bool) -> str:
    """``"gpu"`` when the sizes are GPUs (Slurm, a spec with GPUs), else ``"cpu"``."""
    return "gpu" if cluster and spec.resources.gpus_per_worker else "cpu"


def measure_profile(
    spec: StudySpec,
    sizes: Sequence[int] = DEFAULT_SIZES,
    steps: int = DEFAULT_STEPS,
    *,
    backend: Backend | None = None,
    decision: float | None = None,
    together: Sequence[int] = (),
    say: Callable[[str], None] = lambda line: None,
) -> tuple[Profile, list[SizeRun], SyncRun | None]:
    """Run a short study of ``spec`` per size, for each count ``n >= 2`` of ``together`` one
    of ``n`` workers at once at the smallest size, and, unless ``decision`` (SYNC, seconds)
    is given, one of rung decisions (:func:`sync_spec`); return the profile, what each size
    and together run measured (the together runs last), and what the rung decisions measured
    (``None``: not run; SYNC is then ``decision``, or 0).

    Raises:
        PlanningError: ``steps`` < 1 or no size.
        ShortStudyFailed: A short study's trial failed (naming its error and its log).
        LeaseHeld: A previous short study's controller is still running.
    """
    cluster = backend is not None and backend.cluster
    if steps < 1:
        raise PlanningError(
            f"--steps {steps}: the steps to time per size must be >= 1 (e.g. --steps 5)"
        )
    if not sizes:
        raise PlanningError("--sizes: give at least one device count, e.g. --sizes 1,2,4")
    runs = []
    for devices in sizes:
        say(f"measuring {devices} device(s) per trial ...")
        short = size_spec(spec, devices, steps, cluster=cluster)
        runs.append(run_size(short, devices, backend=backend))
        say(
            f"  {devices}: {np.mean(runs[-1].steps):.4g} s/step over "
            f"{len(runs[-1].steps)} steps ({short.directory})"
        )
    queue = {run.devices: run.queue_wait or (0.0,) for run in runs}
    alone = next(run for run in runs if run.devices == min(sizes))
    extra: dict[str, dict[int, tuple[float, ...]]] = {
        "startup_together": {},
        "warmup_together": {},
        "crowding": {},
    }
    for n in sorted({n for n in together if n >= 2}):
        say(f"measuring {n} workers starting and training at once ...")
        short = size_spec(spec, alone.devices, steps, cluster=cluster, together=n)
        crowd = run_size(short, alone.devices, backend=backend)
        for name, table in together_fields(crowd, alone, n).items():
            extra[name].update(table)
        queue[crowd.devices] = queue[crowd.devices] + crowd.queue_wait
        say(
            f"  {n} at once: INIT {np.mean(crowd.startup):.3g} s, warm-up "
            f"{np.mean(extra['warmup_together'].get(n, (0.0,))):.3g} s, steps "
            f"{np.mean(extra['crowding'][n]):.3g}x as long ({short.directory})"
        )
        runs.append(crowd)
    sync = None
    decisions: tuple[float, ...] = (decision or 0.0,)
    startup = _pooled(run.startup for run in runs[: len(sizes)])
    short_sync = None if decision is not None else sync_spec(spec, alone.devices, cluster=cluster)
    if short_sync is not None:
        say(
            f"measuring SYNC: rung decisions of the sha policy, {short_sync.num_trials} trials "
            "in brackets of two ..."
        )
        sync = run_sync(short_sync, backend=backend)
        decisions = sync.decision
        queue[alone.devices] = queue[alone.devices] + sync.queue_wait
        startup = startup + sync.startup
        say(
            f"  SYNC {np.mean(decisions):.3g} s over {len(decisions)} rung decision(s) "
            f"({short_sync.directory})"
        )
    sized = runs[: len(sizes)]
    counts = sorted(extra["crowding"])
    profile = Profile(
        step_seconds={run.devices: run.steps for run in sized},
        segment_start=_median(run.segment_start for run in sized),
        startup=startup,
        queue_wait=queue,
        decision=decisions,
        checkpoint_save=_pooled(run.checkpoint_save for run in runs),
        checkpoint_load=_pooled(run.checkpoint_load for run in runs),
        device=device_kind(spec, cluster=cluster),
        source=f"hpctune profile {spec.source} ({backend.name if backend else 'local'}, "
        f"{steps} steps per size"
        + (f", {', '.join(map(str, counts))} workers together" if counts else "")
        + (", SYNC measured" if sync is not None else "")
        + f", {profile_root(spec)})",
        warmup=_median(run.warmup for run in sized),
        segment_gap=_median(run.segment_gap for run in sized),
        **extra,
    )
    return profile, runs, sync


def together_fields(
    crowd: SizeRun, alone: SizeRun, together: int
) -> dict[str, dict[int, tuple[float, ...]]]:
    """The profile's fields with ``together`` workers at once, from the short study that ran
    them (``crowd``) and the one of a worker alone at the same size (``alone``): INIT as
    measured; warm-up: each worker's first segment start less the median segment start alone;
    crowding: its steps' seconds over the mean alone, at least 1 (workers together are not
    faster than one alone: a lower ratio means the node was busier while one ran alone)."""
    base = float(np.median(alone.segment_start)) if alone.segment_start else 0.0
    step = float(np.mean(alone.steps))
    warm = tuple(max(f - base, 0.0) for f in crowd.first_start)
    ratios = tuple(s / step for s in crowd.steps)
    if np.mean(ratios) < 1.0:
        ratios = (1.0,)
    return {
        "startup_together": {together: crowd.startup} if crowd.startup else {},
        "warmup_together": {together: warm} if warm else {},
        "crowding": {together: ratios},
    }


def run_size(spec: StudySpec, devices: int, *, backend: Backend | None = None) -> SizeRun:
    """Run one short study (replacing an earlier one at the same place) and read it."""
    run_short(spec, f"at {devices} device(s) per trial", backend=backend)
    return read_size(spec.directory, devices)


def run_sync(spec: StudySpec, *, backend: Backend | None = None) -> SyncRun:
    """Run the short study of rung decisions (:func:`sync_spec`; replacing an earlier one)
    and read it."""
    run_short(spec, "of rung decisions (SYNC)", backend=backend)
    return read_sync(spec)


def run_short(spec: StudySpec, what: str, *, backend: Backend | None = None) -> None:
    """Run one short study in the foreground, replacing an earlier one at the same place
    (``what``: which one, for the message when it is interrupted): the controller here, its
    workers on ``backend`` (default: local processes; on a cluster, its jobs).

    Raises:
        LeaseHeld: A previous short study's controller is still running there.
        Interrupted: The profile was interrupted (naming the short study).
    """
    target = spec.directory
    if target.exists():
        held = rival(target)
        if held is not None:
            raise LeaseHeld(target, held)
        shutil.rmtree(target)
    paths = create_study(spec)
    poll = 0.5 if backend is not None and backend.cluster else 0.1
    try:
        run_local(paths, backend=backend, out=io.StringIO(), poll_interval=poll)
    except Interrupted as exc:  # its resume hint does not apply: a profile starts again
        raise Interrupted(
            f"profile interrupted {what}; its short study is {paths.root}; run "
            "`hpctune profile` again to measure",
            exc.exit_code - 128,
        ) from None


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


def _pooled(groups: Iterable[Sequence[float]]) -> tuple[float, ...]:
    return tuple(value for group in groups for value in group)


def _median(groups: Iterable[Sequence[float]]) -> tuple[float, ...]:
    """The median of the pooled samples, as one sample (``(0.0,)`` for none): a set-up time
    measured on a few segments, robust to one slowed by another process on the node."""
    pooled = _pooled(groups)
    return (float(np.median(pooled)),) if pooled else (0.0,)


__all__ = [
    "DEFAULT_SIZES",
    "DEFAULT_STEPS",
    "SYNC_POLICY",
    "SYNC_TRIALS",
    "ShortStudyFailed",
    "SizeRun",
    "SyncRun",
    "device_kind",
    "generator_trials",
    "measure_profile",
    "parse_sizes",
    "profile_root",
    "read_size",
    "read_sync",
    "run_short",
    "run_sync",
    "size_spec",
    "sync_spec",
    "together_fields",
    "worker_segments",
]
