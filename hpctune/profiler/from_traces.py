"""A profile from recorded runs: seconds per step from traces or finished studies (RubberBand §5).

Each measured size (devices per trial) comes from a trace file (docs/traces.md) or a finished
study directory (its journal, read as :meth:`~hpctune.simulator.traces.Trace.from_study` does);
sizes not
measured may be given as throughput speed-ups over one device. The cluster's latencies (SCALE,
INIT, SYNC) are given in seconds, as ``hpctune simulate`` takes them, or read from a study's
journal (:mod:`hpctune.elastic.measured`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from hpctune.elastic.experiment import PlanningError
from hpctune.elastic.measured import study_decisions, study_latencies, study_stages
from hpctune.elastic.profile import Profile
from hpctune.journal.reader import StudyReader
from hpctune.simulator.traces import Trace

MAX_SAMPLES = 256


def step_samples(trace: Trace, max_samples: int = MAX_SAMPLES) -> tuple[float, ...]:
    """The seconds of every step the trace recorded, as at most ``max_samples`` evenly spaced
    quantiles (the profile keeps the distribution, not every step).

    Raises:
        PlanningError: The trace has no timed step.
    """
    seconds = np.asarray(trace.epoch_seconds, dtype=float)
    seconds = seconds[np.isfinite(seconds)]
    if seconds.size == 0:
        raise PlanningError(f"{trace.source or 'the trace'} has no timed step to profile")
    if seconds.size > max_samples:
        seconds = np.quantile(seconds, (np.arange(max_samples) + 0.5) / max_samples)
    return tuple(float(s) for s in seconds)


def read_steps(source: Path) -> tuple[tuple[float, ...], str]:
    """Step samples and a description of ``source``: a trace file or a study directory."""
    path = Path(source)
    if not path.exists():
        raise PlanningError(f"{path} does not exist; give a trace file or a study directory")
    trace = Trace.from_study(path) if path.is_dir() else Trace.load(path)
    return step_samples(trace), str(path)


def profile_from_steps(
    steps: Mapping[int, tuple[float, ...]],
    speedups: Mapping[int, float] | None = None,
    *,
    queue_wait: Sequence[float] = (0.0,),
    startup: Sequence[float] = (0.0,),
    decision: Sequence[float] = (0.0,),
    segment_start: float = 0.0,
    device: str = "gpu",
    source: str = "",
) -> Profile:
    """A profile of measured step samples per size and ``speedups`` for other sizes (each the
    one-device samples divided by its speed-up).

    Raises:
        PlanningError: A speed-up is given without a one-device measurement, or is not > 0.
    """
    return Profile(
        step_seconds=with_speedups(steps, speedups),
        segment_start=(segment_start,),
        startup=tuple(startup),
        queue_wait={1: tuple(queue_wait)},
        decision=tuple(decision),
        device=device,
        source=source,
    )


def with_speedups(
    steps: Mapping[int, tuple[float, ...]], speedups: Mapping[int, float] | None
) -> dict[int, tuple[float, ...]]:
    """``steps`` and, for each size of ``speedups`` not measured, the one-device samples
    divided by its speed-up.

    Raises:
        PlanningError: A speed-up is given without a one-device measurement, or is not > 0.
    """
    table = dict(steps)
    for size, speedup in sorted((speedups or {}).items()):
        if 1 not in steps:
            raise PlanningError(
                "--speedup is relative to one device: measure one device (--steps 1=TRACE, "
                "or a 1 in --sizes)"
            )
        if not speedup > 0 or size < 1:
            raise PlanningError(f"--speedup {size}={speedup}: sizes >= 1 and speed-ups > 0")
        if size not in table:
            table[size] = tuple(s / speedup for s in steps[1])
    return table


def profile_from_sources(
    sources: Sequence[tuple[int, Path]],
    speedups: Mapping[int, float] | None = None,
    *,
    latencies_from: Path | None = None,
    queue_wait: float = 0.0,
    startup: float = 0.0,
    decision: float | None = None,
    segment_start: float = 0.0,
    device: str = "gpu",
) -> Profile:
    """A profile of the step times in ``sources`` (``(devices per trial, trace file or
    finished study directory)``) and ``speedups`` for other sizes, with the latencies given
    (seconds) or, from ``latencies_from`` (a study directory), its workers' SCALE and INIT
    and, when its rungs are known in advance, the SYNC of the rungs it finished.

    Raises:
        PlanningError: A source is missing or has no timed step, or a speed-up is invalid.
        JournalError: ``latencies_from`` is not a study directory.
    """
    steps: dict[int, tuple[float, ...]] = {}
    described = []
    for size, source in sources:
        steps[size], where = read_steps(source)
        described.append(f"{size}={where}")
    queue_samples: tuple[float, ...] = (queue_wait,)
    startup_samples: tuple[float, ...] = (startup,)
    decision_samples: tuple[float, ...] = (0.0 if decision is None else decision,)
    if latencies_from is not None:
        record = StudyReader(latencies_from).record
        queue_samples, startup_samples = study_latencies(record)
        stages = study_stages(record)
        measured = study_decisions(record, stages) if stages is not None else ()
        decision_samples = measured or decision_samples
        described.append(f"latencies={latencies_from}")
    return profile_from_steps(
        steps,
        speedups,
        queue_wait=queue_samples or (0.0,),
        startup=startup_samples or (0.0,),
        decision=decision_samples,
        segment_start=segment_start,
        device=device,
        source=", ".join(described),
    )


__all__ = [
    "MAX_SAMPLES",
    "profile_from_sources",
    "profile_from_steps",
    "read_steps",
    "step_samples",
    "with_speedups",
]
