"""Profile a study.toml by running it briefly (``hpctune profile STUDY_TOML``): which short
studies run (checked with the backend before any runs), measuring them, the speed-ups given for
sizes not measured, and the text the command prints (:mod:`hpctune.profiler.measure` runs and
reads each short study)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hpctune.backends import Backend
from hpctune.elastic.experiment import PlanningError
from hpctune.elastic.profile import Profile
from hpctune.profiler.from_traces import with_speedups
from hpctune.profiler.measure import (
    SizeRun,
    SyncRun,
    measure_profile,
    parse_sizes,
    size_spec,
    sync_spec,
)
from hpctune.spec import StudySpec
from hpctune.wire.layout import StudyPaths


def together_counts(spec: StudySpec, text: str | None) -> tuple[int, ...]:
    """``--together``: the counts of workers to start at once (default: the spec's slots when
    2 or more; ``"0"``: none).

    Raises:
        PlanningError: A count is not a whole number >= 2.
    """
    if text is None:
        return (spec.resources.slots,) if spec.resources.slots >= 2 else ()
    if text.strip() == "0":
        return ()
    counts = parse_sizes(text, "--together")
    if min(counts) < 2:
        raise PlanningError(
            f"--together {text!r}: counts of workers at once are >= 2 (or 0 for none), e.g. "
            "--together 2,4"
        )
    return counts


@dataclass(frozen=True)
class ProfilePlan:
    """The short studies ``hpctune profile STUDY_TOML`` runs.

    Attributes:
        spec: The study profiled.
        sizes: Devices per trial, one short study each.
        steps: Steps timed at each size.
        together: Counts of workers started at once, one short study each.
        decision: SYNC given (seconds): no short study of rung decisions; ``None``: measured
            when the spec's ``max_steps`` leaves a rung to decide.
        speedups: Speed-ups over one device for sizes not measured.
    """

    spec: StudySpec
    sizes: tuple[int, ...]
    steps: int
    together: tuple[int, ...] = ()
    decision: float | None = None
    speedups: Mapping[int, float] = dataclasses.field(default_factory=dict)

    def short_studies(self, *, cluster: bool) -> list[StudySpec]:
        """Every short study's spec, in the order they run."""
        spec, small = self.spec, min(self.sizes)
        shorts = [size_spec(spec, size, self.steps, cluster=cluster) for size in self.sizes]
        shorts += [
            size_spec(spec, small, self.steps, cluster=cluster, together=n) for n in self.together
        ]
        sync = None if self.decision is not None else sync_spec(spec, small, cluster=cluster)
        return shorts if sync is None else [*shorts, sync]

    def check(self, backend: Backend) -> None:
        """Refuse, before anything runs, what the backend would not run.

        Raises:
            PlanningError: A speed-up without a one-device size, or one not > 0.
            StudySpecError: The backend refuses a short study's jobs.
        """
        if self.speedups:
            with_speedups({size: (1.0,) for size in self.sizes}, self.speedups)
        for short in self.short_studies(cluster=backend.cluster):
            backend.check(short)

    def headline(self, backend: Backend) -> str:
        """What is about to run, in one line."""
        where = f"as {backend.title or backend.name} jobs" if backend.cluster else "here"
        counts = " and ".join(map(str, self.together))
        also = f", then {counts} workers at once" if self.together else ""
        shorts = self.short_studies(cluster=backend.cluster)
        also += (
            ", then rung decisions (SYNC)"
            if len(shorts) > len(self.sizes) + len(self.together)
            else ""
        )
        return (
            f"profiling {self.spec.name}: {self.steps} step(s) at "
            f"{', '.join(map(str, self.sizes))} device(s) per trial, one short study each"
            f"{also}, {where}"
        )


@dataclass(frozen=True)
class MeasuredProfile:
    """A profile measured by short studies, and what each measured.

    Attributes:
        plan: What ran.
        profile: The profile (speed-ups applied).
        path: Where it was saved.
        runs: Each size's short study, then each together one's.
        sync: The short study of rung decisions (``None``: not run).
    """

    plan: ProfilePlan
    profile: Profile
    path: Path
    runs: list[SizeRun]
    sync: SyncRun | None

    def lines(self) -> list[str]:
        """The profile, then SCALE and INIT per size, checkpoints, segments, together runs
        and SYNC, and a note where sizes exceed this machine's CPUs."""
        plan, profile = self.plan, self.profile
        sized = self.runs[: len(plan.sizes)]
        lines = profile_lines(profile, self.path, {run.devices for run in self.runs})
        lines += [
            f"  {run.devices:>3}: SCALE {_mean(run.queue_wait)}, INIT {_mean(run.startup)} "
            f"({run.directory})"
            for run in sized
        ]
        lines.append(
            f"  checkpoint save {_mean(profile.checkpoint_save)}, load "
            f"{_mean(profile.checkpoint_load)} (means of {len(profile.checkpoint_save)} and "
            f"{len(profile.checkpoint_load)}); segment start {_mean(profile.segment_start)}, "
            f"gap between segments {_mean(profile.segment_gap)}, first segment's warm-up "
            f"{_mean(profile.warmup)}"
        )
        lines += [
            f"  {n} workers at once: INIT {_mean(profile.startup_at(n))}, warm-up "
            f"{_mean(profile.warmup_at(n))}, steps {profile.crowding_at(n):.3g}x as long "
            f"({run.directory})"
            for n, run in zip(plan.together, self.runs[len(plan.sizes) :], strict=True)
        ]
        return lines + self._sync_lines()

    def _sync_lines(self) -> list[str]:
        if self.sync is not None:
            return [
                f"  SYNC {_mean(self.sync.decision)} over {len(self.sync.decision)} rung "
                f"decision(s) of the sha policy ({self.sync.directory})"
            ]
        if self.plan.decision is not None:
            return [f"  SYNC {self.plan.decision:.3g} s: given with --decision, not measured"]
        return [
            f"  SYNC not measured: max_steps {self.plan.spec.max_steps} leaves no rung to "
            "decide; 0 s (give it with --decision SECONDS)"
        ]

    def cpu_note(self, *, cluster: bool) -> str | None:
        """A note when sizes above this machine's CPUs shared them (a local profile)."""
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        if cluster or cpus is None or max(self.plan.sizes) <= cpus:
            return None
        return (
            f"note: this machine gives this process {cpus} CPU(s); sizes above {cpus} share "
            "them, so their times show oversubscription, not scaling"
        )


def profile_study(
    plan: ProfilePlan,
    backend: Backend,
    out: Path | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> MeasuredProfile:
    """Run the short studies of ``plan`` on ``backend``, add its speed-ups, and save the
    profile to ``out`` (default: ``profile.json`` in the study directory).

    Raises:
        ShortStudyFailed: A short study's trial failed (naming its error and its log).
        LeaseHeld: A previous short study's controller is still running.
    """
    profile, runs, sync = measure_profile(
        plan.spec,
        plan.sizes,
        plan.steps,
        backend=backend,
        decision=plan.decision,
        together=plan.together,
        say=say,
    )
    if plan.speedups:
        steps = with_speedups(profile.step_seconds, plan.speedups)
        profile = dataclasses.replace(profile, step_seconds=steps)
    target = out or StudyPaths(plan.spec.directory).profile
    profile.save(target)
    return MeasuredProfile(plan, profile, target, runs, sync)


def profile_lines(profile: Profile, path: Path, measured: set[int]) -> list[str]:
    """A profile as text: seconds per step and speed-up per size (``measured``: the sizes
    measured, the others from ``--speedup``), then the mean SCALE, INIT and SYNC."""
    lines = [f"profile: {path} ({profile.source})"]
    for size in profile.sizes:
        how = "measured" if size in measured else "from --speedup"
        lines.append(
            f"  {size:>3} {profile.device}s/trial: {profile.step_mean(size):.4g} s/step, "
            f"speed-up {profile.speedup(size):.3g} ({how}, {len(profile.step_seconds[size])} "
            "samples)"
        )
    queue = [v for samples in profile.queue_wait.values() for v in samples]
    lines.append(
        f"  SCALE {np.mean(queue):.3g} s, INIT {np.mean(profile.startup):.3g} s, SYNC "
        f"{np.mean(profile.decision):.3g} s (means of {len(queue)}, {len(profile.startup)} and "
        f"{len(profile.decision)} samples)"
    )
    return lines


def _mean(samples: Sequence[float]) -> str:
    return f"{np.mean(samples):.3g} s" if samples else "not measured"


__all__ = [
    "MeasuredProfile",
    "ProfilePlan",
    "profile_lines",
    "profile_study",
    "together_counts",
]
