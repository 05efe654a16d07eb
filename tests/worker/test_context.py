"""Tests of the training API (TrialContext) with real event files and checkpoint files."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from hpctune.errors import CheckpointError, HpctuneError
from hpctune.files import write_json_atomic
from hpctune.simulator import SimClock
from hpctune.study.states import Decision
from hpctune.wire.eventlog import EventWriter, read_events
from hpctune.wire.protocol import Assignment, DecisionMessage
from hpctune.worker.context import TrialContext, TrialStop


def _assignment(**changes: object) -> Assignment:
    fields: dict[str, object] = {
        "segment_id": 7,
        "trial_id": 3,
        "seed": 11,
        "start_step": 0,
        "until_step": 10,
        "max_steps": 10,
        "boundary": 2,
        "metric": "acc",
        "mode": "max",
        "entry": {"file": None, "module": "m", "function": "f"},
        "params": {
            "lr": {"schedule": "step", "base": 1.0, "step_size": 2, "gamma": 0.5},
            "width": 8,
        },
    }
    fields.update(changes)
    return Assignment(**fields)  # type: ignore[arg-type]


def _context(tmp_path: Path, **changes: object) -> tuple[TrialContext, EventWriter]:
    events = EventWriter(tmp_path / "events.jsonl")
    a = _assignment(**changes)
    ctx = TrialContext(
        a,
        study_dir=tmp_path,
        events=events,
        checkpoint_path=lambda step: tmp_path / "ck" / f"step-{step}.pt",
        decision_file=tmp_path / "decision.json",
    )
    return ctx, events


def _records(tmp_path: Path) -> list[dict[str, object]]:
    return read_events(tmp_path / "events.jsonl").records


def test_params_evaluate_schedules_at_the_current_step(tmp_path: Path) -> None:
    ctx, _ = _context(tmp_path)
    assert ctx.params == {"lr": 1.0, "width": 8}
    ctx.report(step=1, acc=0.1)
    ctx.report(step=2, acc=0.2)
    assert ctx.params["lr"] == 0.5
    assert ctx.value("lr", 4) == 0.25
    assert ctx.raw_params["lr"]["schedule"] == "step"
    with pytest.raises(KeyError, match="width"):
        ctx.value("depth")


def test_report_writes_self_checking_events(tmp_path: Path) -> None:
    ctx, events = _context(tmp_path)
    ctx.report(acc=0.5, loss=torch.tensor(1.5))  # step defaults to last + 1
    ctx.report(step=3, acc=0.75)
    events.close()
    records = _records(tmp_path)
    assert [r["step"] for r in records] == [1, 3]
    assert records[0]["metrics"] == {"acc": 0.5, "loss": 1.5}


@pytest.mark.parametrize(
    ("step", "message"),
    [
        (0, "after the last step"),
        (11, "max_steps=10"),
        (2.5, "must be an int"),
        (True, "must be an int"),
    ],
)
def test_bad_steps_are_refused(tmp_path: Path, step: object, message: str) -> None:
    ctx, _ = _context(tmp_path)
    with pytest.raises(HpctuneError, match=message):
        ctx.report(step=step, acc=1.0)  # type: ignore[arg-type]


def test_bad_metric_values_are_refused(tmp_path: Path) -> None:
    ctx, _ = _context(tmp_path)
    with pytest.raises(HpctuneError, match="must be a number"):
        ctx.report(acc="high")  # type: ignore[arg-type]
    with pytest.raises(HpctuneError, match="not a bool"):
        ctx.report(acc=True)


def test_a_non_finite_study_metric_stops_the_trial_at_once(tmp_path: Path) -> None:
    ctx, events = _context(tmp_path)
    with pytest.raises(TrialStop) as stop:
        ctx.report(acc=math.nan)
    assert stop.value.decision is Decision.STOP
    assert "diverged" in stop.value.reason
    assert ctx.diverged == "acc is nan at step 1"
    events.close()
    assert math.isnan(_records(tmp_path)[0]["metrics"]["acc"])  # type: ignore[index]


def test_a_non_finite_other_metric_is_only_recorded(tmp_path: Path) -> None:
    ctx, _ = _context(tmp_path)
    assert not ctx.report(acc=0.5, loss=math.inf).should_stop


def test_the_last_step_of_a_segment_says_suspend(tmp_path: Path) -> None:
    ctx, _ = _context(tmp_path, until_step=2)
    assert not ctx.report(acc=0.1).should_stop
    result = ctx.report(acc=0.2)
    assert result.decision is Decision.SUSPEND
    with pytest.raises(TrialStop):  # a function that ignores it is stopped at its next report
        ctx.report(acc=0.3)


def test_a_decision_from_the_controller_reaches_the_loop(tmp_path: Path) -> None:
    ctx, _ = _context(tmp_path)
    ctx.report(acc=0.1)
    write_json_atomic(
        tmp_path / "decision.json", DecisionMessage(7, 1, Decision.STOP, "poor").to_dict()
    )
    result = ctx.report(acc=0.2)  # step 2 is a boundary: the file is read
    assert result.should_stop
    assert result.reason == "poor"
    assert ctx.decision_reason == "poor"


def test_a_decision_for_another_segment_is_ignored(tmp_path: Path) -> None:
    ctx, _ = _context(tmp_path)
    write_json_atomic(
        tmp_path / "decision.json", DecisionMessage(6, 1, Decision.STOP, "old").to_dict()
    )
    assert not ctx.report(step=2, acc=0.2).should_stop


class _ControllerClock(SimClock):
    """Simulated time for the worker's side; the "controller" writes its decision file once
    the time reaches ``at`` (never when ``at`` is None). Sleeping only advances the time."""

    def __init__(self, decision_file: Path, at: float | None) -> None:
        super().__init__(start=100.0)
        self.decision_file, self.at = decision_file, at
        self.sleeps = 0

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        self.sleeps += 1
        if self.at is not None and self.now() >= self.at and not self.decision_file.exists():
            message = DecisionMessage(7, 2, Decision.SUSPEND, "opportunistic")
            write_json_atomic(self.decision_file, message.to_dict())


def _timed_context(tmp_path: Path, at: float | None, wait: float) -> tuple[TrialContext, Any]:
    clock = _ControllerClock(tmp_path / "decision.json", at)
    ctx = TrialContext(
        _assignment(decision_wait=wait),
        study_dir=tmp_path,
        events=EventWriter(tmp_path / "events.jsonl"),
        checkpoint_path=lambda step: tmp_path / "ck" / f"step-{step}.pt",
        decision_file=tmp_path / "decision.json",
        clock=clock,
    )
    return ctx, clock


def test_at_a_boundary_the_worker_waits_a_little_for_the_decision(tmp_path: Path) -> None:
    ctx, clock = _timed_context(tmp_path, at=100.3, wait=5.0)
    assert not ctx.report(step=1, acc=0.4).should_stop  # not a boundary: no wait
    assert clock.now() == 100.0
    result = ctx.report(step=2, acc=0.5)
    assert result.decision is Decision.SUSPEND
    # it polled until the decision came (0.3 s of its clock), not the whole 5 s
    assert 100.3 <= clock.now() < 100.4
    assert clock.sleeps >= 6
    report = [r for r in _records(tmp_path) if r["kind"] == "report"][-1]
    assert report["t"] == 100.0  # the report line carries the worker's clock


def test_without_a_decision_the_worker_goes_on_after_the_wait(tmp_path: Path) -> None:
    ctx, clock = _timed_context(tmp_path, at=None, wait=0.2)
    assert not ctx.report(step=2, acc=0.5).should_stop
    assert 100.2 <= clock.now() < 100.3  # the whole wait, and no more


def test_checkpoints_round_trip_with_their_checksum(tmp_path: Path) -> None:
    ctx, events = _context(tmp_path)
    ctx.report(acc=0.1)
    path = ctx.save_checkpoint({"w": torch.arange(5), "epoch": 1})
    events.close()
    record = _records(tmp_path)[-1]
    assert record["kind"] == "checkpoint"
    assert record["step"] == 1
    assert record["path"] == "ck/step-1.pt"
    assert record["nbytes"] == path.stat().st_size
    resumed, _ = _context(
        tmp_path, start_step=1, checkpoint=record["path"], checkpoint_sha256=record["sha256"]
    )
    state = resumed.load_checkpoint()
    assert state["epoch"] == 1
    assert torch.equal(state["w"], torch.arange(5))
    assert resumed.step == 1


def test_a_changed_checkpoint_is_detected(tmp_path: Path) -> None:
    ctx, events = _context(tmp_path)
    ctx.report(acc=0.1)
    path = ctx.save_checkpoint({"w": 1})
    events.close()
    record = _records(tmp_path)[-1]
    path.write_bytes(path.read_bytes()[:-1])
    resumed, _ = _context(
        tmp_path, start_step=1, checkpoint=record["path"], checkpoint_sha256=record["sha256"]
    )
    with pytest.raises(CheckpointError, match="SHA-256"):
        resumed.load_checkpoint()
    path.unlink()
    with pytest.raises(CheckpointError, match="missing"):
        resumed.load_checkpoint()


def test_a_fresh_start_has_no_checkpoint(tmp_path: Path) -> None:
    ctx, _ = _context(tmp_path)
    assert ctx.load_checkpoint() is None
    with pytest.raises(HpctuneError, match="report the step first"):
        ctx.save_checkpoint({}, step=3)


def test_changed_lists_the_values_that_change_at_a_step(tmp_path: Path) -> None:
    ctx, _ = _context(tmp_path, start_step=2)
    assert ctx.changed(2) == {"lr": 0.5, "width": 8}  # the first step: everything
    assert ctx.changed(3) == {}
    assert ctx.changed(4) == {"lr": 0.25}


def test_step_seeds_depend_on_the_seed_and_step_only(tmp_path: Path) -> None:
    ctx, _ = _context(tmp_path)
    other, _ = _context(tmp_path / "other", trial_id=9, start_step=4, segment_id=8)
    assert [ctx.step_seed(s) for s in range(6)] == [other.step_seed(s) for s in range(6)]
    assert len({ctx.step_seed(s) for s in range(100)}) == 100
    reseeded, _ = _context(tmp_path / "third", seed=12)
    assert reseeded.step_seed(0) != ctx.step_seed(0)
    assert all(0 <= ctx.step_seed(s) < 2**31 for s in range(10))


def test_checkpoints_are_due_at_boundaries_stage_ends_and_the_segment_end(
    tmp_path: Path,
) -> None:
    ctx, _ = _context(tmp_path, until_step=9, checkpoint_steps=(3, 7))
    due = [s for s in range(1, 11) if ctx.checkpoint_due(s)]
    assert due == [2, 3, 4, 6, 7, 8, 9, 10]
