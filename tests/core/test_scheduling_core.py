"""The scheduling core is pure: driven in memory, the controller does no I/O and reads no clock.

The controller reaches files, processes and time only through what it is given: the wire (the
study directory's files), the executor (processes, Slurm), the journal writer, the curve-fit
service and the :class:`~hpctune.wire.clock.Clock`. Given the simulator's in-memory ones, a whole
study (started, restarted twice from its journal, with faults, curve fits and a stage tree)
runs under :func:`~hpctune.testing._io_guard.forbid_io`, which refuses every file, socket,
process or sleep and every read of a :mod:`time` clock in this thread, so the rules that run on
a cluster are the ones the simulator measures, with nothing else in between.
"""

from __future__ import annotations

from typing import Any

import pytest

from hpctune.policies import POLICIES, make_policy
from hpctune.simulator import (
    Faults,
    PredictionCache,
    Simulator,
    SimulatorConfig,
    simulation_context,
)
from hpctune.simulator.traces import Trace
from hpctune.study.states import StudyState
from hpctune.testing._io_guard import forbid_io
from tests.conftest import REPO

CONFIGS = 12

CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    *((name, {}, {}) for name in POLICIES if name not in ("replay", "pbt", "pbt-truncation")),
    ("pbt", {"population_size": 4}, {}),
    ("pbt-truncation", {"population_size": 4}, {}),
    ("pop", {"boundary": 5}, {"fit_seconds": 0.2}),
    ("asha", {}, {"stages": True}),
    ("default", {}, {"faults": Faults(lost={1: 0.5}, crashes={3: 2})}),
    ("sha", {}, {"faults": Faults(hung={2: 0.4}, worker_timeout=3.0)}),
]


@pytest.fixture(scope="module")
def digits() -> tuple[Trace, PredictionCache]:
    trace = Trace.load(REPO / "benchmarks" / "traces" / "digits.h5").subset(list(range(CONFIGS)))
    cache = PredictionCache(trace)  # fitted before the guard: the amortised model reads its
    # weights from the package once
    pairs = [(c, n) for c in range(CONFIGS) for n in range(3, trace.num_epochs)]
    cache.prefetch(pairs, trace.num_epochs, workers=1)
    return trace, cache


@pytest.mark.parametrize(
    ("policy", "options", "settings"),
    CASES,
    ids=[f"{p}-{'-'.join(sorted({**o, **s}))}" for p, o, s in CASES],
)
def test_a_study_in_memory_does_no_io_and_reads_no_clock(
    digits: tuple[Trace, PredictionCache],
    policy: str,
    options: dict[str, Any],
    settings: dict[str, Any],
) -> None:
    trace, cache = digits
    config = SimulatorConfig(**settings)
    sim = Simulator(
        trace,
        make_policy(policy, options, simulation_context(trace, config)),
        slots=3,
        predictions=cache,
        config=config,
    )
    with forbid_io() as violations:
        result = sim.run(restart_at=(0.3, 0.7))
    assert [str(v) for v in violations] == []
    assert sim.restarts == 2
    assert result.trials_started > 0
    assert sim.record.state in (StudyState.FINISHED, StudyState.FAILED)


def test_the_guard_catches_a_controller_that_reads_the_wall_clock(
    digits: tuple[Trace, PredictionCache], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check can fail: a controller step that reads ``time.time()`` is refused."""
    import time

    from hpctune.core import SchedulingCore
    from hpctune.testing._io_guard import ForbiddenIOError

    trace, cache = digits
    step = SchedulingCore.step

    def step_reading_the_clock(self: SchedulingCore) -> bool:
        time.time()
        return step(self)

    monkeypatch.setattr(SchedulingCore, "step", step_reading_the_clock)
    policy = make_policy("default", {}, simulation_context(trace))
    sim = Simulator(trace, policy, slots=3, predictions=cache)
    with forbid_io() as violations, pytest.raises(ForbiddenIOError):
        sim.run()
    assert [str(v) for v in violations] == ["time.time()"]
