"""The controller killed and resumed, tested on the simulated clock: fast, and free of sleeps.

A simulated study is the real controller with simulated workers (``hpctune.simulator``); its
journal is in memory but replayed by the journal's own reader (``load_state``). Replacing the
controller at random instants with a new one built from the journal, as ``hpctune resume``
does after a kill, must change nothing: the same trials (configurations, forks), the same
decisions at the same steps, the same time to the target. Every registered policy that runs
without a plan of its own is checked (``replay`` needs a recorded study).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from hpctune.journal.records import LogEntry, WarningEntry
from hpctune.policies import POLICIES, make_policy
from hpctune.simulator import PredictionCache, Simulator, simulation_context
from hpctune.simulator.traces import Trace

TRACE = Trace.load(Path(__file__).parents[2] / "benchmarks" / "traces" / "digits.h5").subset(
    range(48)
)
OPTIONS: dict[str, dict[str, Any]] = {
    "pbt": {"population_size": 8, "steps_per_generation": 5},
    "pbt-truncation": {"population_size": 8, "perturbation_interval": 5},
    "bandit": {"boundary": 5},
    "pop": {"boundary": 5},
    "earlyterm": {"boundary": 5},
}
PREDICTIONS = PredictionCache(TRACE, bounds=(0.0, 1.0))


@pytest.mark.parametrize("name", sorted(n for n in POLICIES if n != "replay"))
@pytest.mark.parametrize("seed", [0, 1])
def test_a_controller_rebuilt_from_the_journal_decides_as_the_one_that_ran(
    name: str, seed: int
) -> None:
    def simulator() -> Simulator:
        policy = make_policy(name, OPTIONS.get(name, {}), simulation_context(TRACE))
        return Simulator(TRACE, policy, slots=4, seed=seed, predictions=PREDICTIONS)

    reference = simulator().run()
    end = reference.end_time
    restart_at = sorted(np.random.default_rng(seed).uniform(0.0, end, size=6).tolist())
    sim = simulator()
    result = sim.run(restart_at=restart_at)
    assert sim.restarts >= 4  # most instants fell before the end
    outcome = [(t.trial, t.config, t.status, t.step) for t in result.trials]
    assert outcome == [(t.trial, t.config, t.status, t.step) for t in reference.trials]
    decisions = [(d.trial, d.step, d.kind, d.reason) for d in result.decisions]
    assert decisions == [(d.trial, d.step, d.kind, d.reason) for d in reference.decisions]
    assert result.time_to_target == reference.time_to_target
    assert result.end_time == reference.end_time


def test_the_restart_check_can_fail() -> None:
    """A controller rebuilt without the policy's journaled state decides differently (ASHA
    forgets the values recorded at its rungs), and the comparison above sees it."""
    policy = make_policy("asha", {"reduction_factor": 2}, simulation_context(TRACE))
    reference = Simulator(TRACE, policy, slots=4, seed=0).run()
    sim = Simulator(
        TRACE,
        make_policy("asha", {"reduction_factor": 2}, simulation_context(TRACE)),
        slots=4,
        seed=0,
    )
    original = sim.restart_controller

    def forgetful() -> None:
        original()
        sim.controller.policy = make_policy(
            "asha", {"reduction_factor": 2}, simulation_context(TRACE)
        )  # state lost

    sim.restart_controller = forgetful  # type: ignore[method-assign]
    result = sim.run(restart_at=[0.3 * reference.end_time, 0.6 * reference.end_time])
    decisions = [(d.trial, d.step, d.kind) for d in result.decisions]
    assert decisions != [(d.trial, d.step, d.kind) for d in reference.decisions]


def test_the_controller_journals_only_registered_record_kinds() -> None:
    """A record kind missing from the journal's registry is refused when written (readers of
    the same format would refuse the journal), naming the place to register it."""
    sim = Simulator(
        TRACE.subset(range(4)), make_policy("asha", {}, simulation_context(TRACE)), slots=2, seed=0
    )

    @dataclass(frozen=True, slots=True, kw_only=True)
    class BogusEntry(LogEntry):
        kind: ClassVar[str] = "bogus"
        note: str

    with pytest.raises(ValueError, match=r"'bogus' \(BogusEntry\) is not registered: add its"):
        sim.controller.log(BogusEntry(note="x"))
    sim.controller.log(WarningEntry(message="registered kinds are journaled"))
    assert sim.controller.state.warnings[-1].message == "registered kinds are journaled"
