"""Issue 13, items 2 and 5: event lines the controller finds on disk after a crash.

The controller is SIGKILLed early; its workers finish their trials and write their event lines,
which no controller ingests. Then one report line gets a flipped byte and another one a metric
named "" (as a worker from before names were checked wrote it), and `hpctune resume` ingests
them. Before: the flipped line's row was lost while the trial showed "completed 8/8" (only a log
line), and the bad name made every resume die in the journal commit.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpctune.api import Study, open_study
from hpctune.journal.store import JournalReader
from hpctune.study.states import StudyState, TrialStatus
from hpctune.wire.eventlog import decode_line, encode_line, read_events
from tests.conftest import kill_workers, run_hpctune, start_hpctune, wait_for, write_study

FAULTY = Path(__file__).with_name("faulty.py")
MAX_STEPS = 8


def _ended(path: Path) -> bool:
    return any(r.get("kind") == "end" for r in read_events(path).records)


def _rewrite_report(path: Path, step: int, change: str) -> None:
    """Flip a byte of the report line of ``step`` (``"flip"``) or add a metric named ""."""
    lines = path.read_bytes().split(b"\n")
    for i, line in enumerate(lines):
        record = decode_line(line)
        if record is None or record.get("kind") != "report" or record["step"] != step:
            continue
        if change == "flip":
            at = line.index(b'"t":') + 6
            lines[i] = line[:at] + bytes([line[at] ^ 0x01]) + line[at + 1 :]
        else:
            record["metrics"][""] = 1.0
            lines[i] = encode_line(record).rstrip(b"\n")
        path.write_bytes(b"\n".join(lines))
        return
    raise AssertionError(f"no report of step {step} in {path}")


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Study, str]]:
    folder = tmp_path_factory.mktemp("event-lines")
    spec = write_study(
        folder,
        train=FAULTY,
        max_steps=MAX_STEPS,
        num_trials=2,
        space={"x": {"type": "float", "low": 0.5, "high": 1.0}, "sleep": 0.2},
    )
    study_dir = folder / "study"
    events = [study_dir / "events" / f"segment-{s:06d}.jsonl" for s in (0, 1)]
    launch = start_hpctune("launch", str(spec), "--local")
    try:
        assert wait_for(lambda: all(p.exists() and p.stat().st_size for p in events), 120)
        os.kill(launch.pid, signal.SIGKILL)  # the controller only; the workers go on
        launch.wait()
        assert wait_for(lambda: all(_ended(p) for p in events), 120)
        cursors = JournalReader(study_dir / "journal.zarr").cursors
        for path in events:  # the lines changed below were never ingested
            assert cursors.get(path.name, 0) < path.read_bytes().index(b'"step":5')
        _rewrite_report(events[0], 5, "flip")
        _rewrite_report(events[1], 5, "empty name")
        result = run_hpctune("resume", str(study_dir), "--local")
        assert result.returncode == 0, result.stdout + result.stderr
        yield open_study(study_dir), result.stdout
    finally:
        launch.kill()
        kill_workers(study_dir)


def test_a_corrupt_event_line_is_counted_and_shown(resumed: tuple[Study, str]) -> None:
    study, _ = resumed
    trial = study.trial(0)
    assert trial.status is TrialStatus.COMPLETED
    assert trial.missing_rows == 1
    assert study.curve(0).steps.tolist() == [1, 2, 3, 4, 6, 7, 8]
    assert study.trials_frame().set_index("trial").loc[0, "missing_rows"] == 1
    status = run_hpctune("status", str(study.directory), check=True).stdout
    assert "completed with 1 missing rows" in status
    assert "metric rows missing (corrupt event lines skipped): trial 0: 1" in status
    data = json.loads(run_hpctune("status", str(study.directory), "--json", check=True).stdout)
    assert data["trials"][0]["missing_rows"] == 1
    assert study.trial(1).missing_rows == 0


def test_a_bad_metric_name_on_disk_does_not_brick_resume(resumed: tuple[Study, str]) -> None:
    study, out = resumed
    assert study.record.state is StudyState.FINISHED
    trial = study.trial(1)
    assert trial.status is TrialStatus.COMPLETED
    assert study.curve(1).steps.tolist() == list(range(1, MAX_STEPS + 1))  # its row is kept
    assert "" not in study.metric_names()
    warnings = [w for w in study.record.warnings if w.code.startswith("metric-name:")]
    assert len(warnings) == 1
    assert "must not be empty" in warnings[0].message
    assert "must not be empty" in out
    again = run_hpctune("resume", str(study.directory), "--local")  # and again: fine
    assert again.returncode == 0, again.stdout + again.stderr
