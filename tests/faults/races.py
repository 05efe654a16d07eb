"""The two-controller races of issue 13, run for real and measured.

Each race runs real ``hpctune`` processes on a real study (the ``behaviours`` workload) and
returns a :class:`RaceOutcome`: how many controllers went on committing after the race, how many
were refused or fenced, and the state of the journal (readable, duplicate metric rows, trials
complete). ``tests/faults/test_controller_race.py`` runs each race once;
``benchmarks/controller_race.py`` repeats them.

* ``resume_resume``: ``hpctune stop``, then ``hpctune resume D --local`` twice, 0.3 s apart.
* ``sigstop``: a foreground ``launch`` is stopped (SIGSTOP, as Ctrl-Z does) until its heartbeat
  is older than the lease timeout, ``hpctune resume`` runs from another shell, then SIGCONT.
* ``sigstop_force``: the same, but the resume uses ``--force`` (the stopped controller is
  fenced) and the stopped one is continued as soon as the new one has committed.
* ``slurm_requeue``: the controller job runs on Slurm and its requeued run starts while the old
  run still runs (as on a node that lost contact): a second ``hpctune controller`` process with
  the job's id and ``SLURM_RESTART_COUNT=1``, as Slurm starts a requeued run.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tests.conftest import WORKLOADS, hpctune_env, kill_workers, run_hpctune, wait_for, write_study

BEHAVIOURS = WORKLOADS / "behaviours.py"
NUM_TRIALS = 4
MAX_STEPS = 10
REFUSED = "a controller is running"
FENCED = "was fenced"


@dataclass
class RaceOutcome:
    """What a race left behind.

    Attributes:
        race: Its name.
        ran_to_end: Controllers that went on to the study's end (exit 0, summary printed).
        refused: Controllers refused because another held the lease (exit 2).
        fenced: Controllers that stopped because another took over (exit 1).
        stray_commits: Journal directories of a fenced epoch committed after the next epoch was
            taken: a controller stopped in the middle of a commit finishes it when continued,
            into its own epoch's directory, which no reader uses any more (harmless).
        unreadable: The journal could not be read afterwards.
        duplicate_rows: Metric rows present twice (raw rows with the same trial, segment and
            step, plus valid rows with the same trial and step).
        completed: Trials completed.
        valid_rows: Valid metric rows (``NUM_TRIALS * MAX_STEPS`` when nothing is lost).
        outputs: Each controller's exit code and last output lines (for messages).
    """

    race: str
    ran_to_end: int = 0
    refused: int = 0
    fenced: int = 0
    stray_commits: int = 0
    unreadable: bool = False
    duplicate_rows: int = 0
    completed: int = 0
    valid_rows: int = 0
    outputs: list[str] = field(default_factory=list)

    @property
    def committing(self) -> int:
        """Controllers that went on committing to the study's journal after the race (1
        expected): the fenced and refused ones stopped, and a fenced one's last commit went to
        its own directory."""
        return self.ran_to_end

    @property
    def ok(self) -> bool:
        """One committing controller, a readable journal, no duplicate or lost row."""
        return (
            self.committing == 1
            and not self.unreadable
            and self.duplicate_rows == 0
            and self.completed == NUM_TRIALS
            and self.valid_rows == NUM_TRIALS * MAX_STEPS
        )

    def explain(self) -> str:
        """A summary for assertion messages."""
        return (
            f"{self.race}: ran_to_end={self.ran_to_end} refused={self.refused} "
            f"fenced={self.fenced} stray_commits={self.stray_commits} "
            f"unreadable={self.unreadable} duplicate_rows={self.duplicate_rows} "
            f"completed={self.completed} valid_rows={self.valid_rows}\n" + "\n".join(self.outputs)
        )


def make_study(
    folder: Path,
    *,
    slurm: dict[str, object] | None = None,
    gate: Path | None = None,
    **study: object,
) -> Path:
    """Write a small study (4 trials of 10 steps, 0.2 s each, 2 slots); return its spec.

    ``gate``: trials wait at step 3 until this file exists (so the study cannot end first)."""
    space: dict[str, object] = {"x": {"type": "float", "low": 0.0, "high": 1.0}, "sleep": 0.2}
    if gate is not None:
        space["gate"] = str(gate)
    return write_study(
        folder,
        train=BEHAVIOURS,
        num_trials=NUM_TRIALS,
        max_steps=MAX_STEPS,
        space=space,
        resources={"slots": 2},
        slurm=slurm,
        **study,
    )


def reports(study_dir: Path) -> int:
    """Report lines the workers wrote so far."""
    events = study_dir / "events"
    if not events.is_dir():
        return 0
    return sum(p.read_bytes().count(b'"report"') for p in events.glob("*.jsonl"))


def finish(process: subprocess.Popen[str], timeout: float) -> tuple[int | None, str]:
    """Wait for a controller process; one still running after ``timeout`` s is killed (with its
    session) and reported as one that went on committing."""
    try:
        out, _ = process.communicate(timeout=timeout)
        return process.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, _ = process.communicate()
        return 0, f"{out}\n[still running after {timeout:.0f} s: killed] best trial"


def _record(outcome: RaceOutcome, code: int | None, out: str) -> None:
    """Classify one controller process by its exit code and output."""
    tail = "\n".join(out.strip().splitlines()[-3:])
    outcome.outputs.append(f"[exit {code}] {tail}")
    if code == 0 and "best trial" in out:
        outcome.ran_to_end += 1
    elif REFUSED in out:
        outcome.refused += 1
    elif FENCED in out:
        outcome.fenced += 1


def _stray_commits(study_dir: Path) -> int:
    """Journal directories whose last commit (by their epoch) came after the next epoch was
    taken. Studies without epochs (older versions) have none to count."""
    count = 0
    for path in study_dir.glob("journal-e*.zarr"):
        match = re.fullmatch(r"journal-e(\d+)\.zarr", path.name)
        if match is None:
            continue
        epoch = int(match.group(1))
        next_epoch = study_dir / "controller" / f"epoch-{epoch + 1:08d}"
        try:
            attrs = json.loads((path / "zarr.json").read_text())["attributes"]["hpctune"]
            taken = float(json.loads(next_epoch.read_text())["time"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if attrs.get("epoch") == epoch and float(attrs["time"]) > taken:
            count += 1
    return count


def check_journal(study_dir: Path, outcome: RaceOutcome) -> RaceOutcome:
    """Fill in the journal's figures: readable, duplicate rows, completed trials."""
    from hpctune.api import open_study
    from hpctune.journal.store import JournalReader
    from hpctune.study.states import TrialStatus
    from hpctune.wire.layout import StudyPaths

    outcome.stray_commits = _stray_commits(study_dir)
    try:
        study = open_study(study_dir)
        frame = study.metrics_frame()
        reader = JournalReader(StudyPaths.of(study_dir).journal)
        raw = np.stack(
            [reader.column("metrics", name) for name in ("trial", "segment", "step")], axis=1
        )
    except Exception as exc:  # any failure to read is what is counted here
        outcome.unreadable = True
        outcome.outputs.append(f"journal unreadable: {type(exc).__name__}: {exc}")
        return outcome
    raw_dups = len(raw) - len(np.unique(raw, axis=0)) if len(raw) else 0
    outcome.duplicate_rows = raw_dups + int(frame.duplicated(["trial", "step"]).sum())
    outcome.completed = sum(t.status is TrialStatus.COMPLETED for t in study.trials)
    outcome.valid_rows = len(frame)
    return outcome


def start_hpctune(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start the ``hpctune`` CLI in its own session, as from another shell."""
    return subprocess.Popen(
        [sys.executable, "-m", "hpctune.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env or hpctune_env(),
        start_new_session=True,
    )


def _launch_and_wait(
    spec: Path, study_dir: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    launch = start_hpctune("launch", str(spec), "--local", env=env)
    if not wait_for(lambda: reports(study_dir) >= 2 or launch.poll() is not None, 180):
        launch.kill()
        raise AssertionError("the study did not start training within 180 s")
    if launch.poll() is not None:
        raise AssertionError(f"launch ended early:\n{launch.communicate()[0]}")
    return launch


def resume_resume(tmp: Path, gap: float = 0.3) -> RaceOutcome:
    """``hpctune stop``, then two ``hpctune resume --local`` started ``gap`` s apart."""
    from hpctune.api import open_study
    from hpctune.study.states import StudyState

    study_dir, gate = tmp / "study", tmp / "gate"
    try:
        # the trials wait at step 3 until the controller has taken the stop: the study cannot
        # finish before `hpctune stop` (which a study no controller runs refuses) on a slow machine
        launch = _launch_and_wait(make_study(tmp, gate=gate), study_dir)
        run_hpctune("stop", str(study_dir), check=True)
        stopping = (StudyState.STOPPING, StudyState.STOPPED)
        if not wait_for(lambda: open_study(study_dir).record.state in stopping, 120):
            raise AssertionError("the controller did not take the stop within 120 s")
        gate.touch()
        out, _ = launch.communicate(timeout=300)
        if launch.returncode != 0 or "stopped" not in out:
            raise AssertionError(f"the study did not stop cleanly:\n{out}")
        first = start_hpctune("resume", str(study_dir), "--local")
        time.sleep(gap)
        second = start_hpctune("resume", str(study_dir), "--local")
        outcome = RaceOutcome("resume_resume")
        for process in (first, second):
            _record(outcome, *finish(process, 600))
        return check_journal(study_dir, outcome)
    finally:
        cleanup(study_dir)


def cleanup(study_dir: Path) -> None:
    """Kill the study's leftover worker processes, also when its journal is unreadable."""
    try:
        kill_workers(study_dir)
    except Exception:  # a damaged journal: find the workers from their heartbeats
        for path in study_dir.glob("workers/*/heartbeat.json"):
            try:
                pid = int(json.loads(path.read_text())["pid"])
                os.killpg(pid, signal.SIGKILL)
            except (OSError, ValueError, KeyError, TypeError):
                continue


def _heartbeat_age(study_dir: Path) -> float:
    try:
        beat = json.loads((study_dir / "controller.json").read_text())
        return time.time() - float(beat["time"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0


def sigstop(tmp: Path, lease_timeout: float | None = None, *, force: bool = False) -> RaceOutcome:
    """Stop a foreground controller past the heartbeat age, resume from another shell, continue.

    ``lease_timeout``: sets ``HPCTUNE_LEASE_TIMEOUT`` for every process (default: the built-in
    30 s). With ``force`` the resume takes over (``--force``) and the stopped controller is
    continued once the new one holds its epoch and has committed.
    """
    study_dir = tmp / "study"
    env = hpctune_env()
    if lease_timeout is not None:
        env["HPCTUNE_LEASE_TIMEOUT"] = str(lease_timeout)
    age = 30.0 if lease_timeout is None else lease_timeout
    outcome = RaceOutcome("sigstop_force" if force else "sigstop")
    launch = None
    try:
        launch = _launch_and_wait(make_study(tmp), study_dir, env)
        os.kill(launch.pid, signal.SIGSTOP)  # Ctrl-Z: the workers run in their own sessions
        wait_for(lambda: _heartbeat_age(study_dir) > age + 1.0, age + 60, interval=0.5)
        args = ["resume", str(study_dir), "--local", *(["--force"] if force else [])]
        other = start_hpctune(*args, env=env)
        if force:
            taken = study_dir / "controller" / f"epoch-{2:08d}"
            wait_for(
                lambda: (
                    other.poll() is not None
                    or (taken.exists() and (study_dir / "journal-e00000002.zarr").exists())
                ),
                120,
            )
            wait_for(lambda: other.poll() is not None or _heartbeat_age(study_dir) < 1.0, 60)
            os.kill(launch.pid, signal.SIGCONT)
            results = [finish(launch, 600), finish(other, 600)]
        else:
            first = finish(other, 900)
            os.kill(launch.pid, signal.SIGCONT)
            results = [first, finish(launch, 600)]
        for code, text in results:
            _record(outcome, code, text)
        return check_journal(study_dir, outcome)
    finally:
        if launch is not None and launch.poll() is None:
            os.kill(launch.pid, signal.SIGCONT)
            launch.kill()
        cleanup(study_dir)


def slurm_requeue(tmp: Path, name: str) -> RaceOutcome:
    """The controller job's requeued run starts while its first run still runs.

    Slurm runs a job once at a time, so the requeued run (on another node, after the first one's
    node lost contact) is started here with the job's environment: ``SLURM_JOB_ID`` of the job
    and ``SLURM_RESTART_COUNT=1``; its workers are Slurm jobs as usual.
    """
    study_dir = tmp / "study"
    spec = make_study(tmp, name=name, slurm={"partition": "debug", "time": 10})
    launched = run_hpctune("launch", str(spec), check=True).stdout
    match = re.search(r"controller job: (\d+)", launched)
    if match is None:
        raise AssertionError(launched)
    job = match.group(1)
    if not wait_for(lambda: reports(study_dir) >= 2, 240, interval=0.2):
        raise AssertionError("the Slurm study did not start training within 240 s")
    env = hpctune_env()
    env.update(SLURM_JOB_ID=job, SLURM_RESTART_COUNT="1")
    requeued = subprocess.Popen(
        [sys.executable, "-m", "hpctune.cli", "controller", str(study_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    outcome = RaceOutcome("slurm_requeue")
    code, text = finish(requeued, 600)
    gone = wait_for(
        lambda: (
            not subprocess.run(
                ["squeue", "-h", "-j", job], capture_output=True, text=True, timeout=30
            ).stdout.strip()
        ),
        120,
        interval=1.0,
    )
    first = (study_dir / "logs" / f"controller-{job}.out").read_text()
    if not gone:  # still running: it goes on committing
        outcome.ran_to_end += 1
        outcome.outputs.append(f"[job {job} still running] {first[-300:]}")
        subprocess.run(["scancel", job], capture_output=True, timeout=30)
    else:
        _record(outcome, 0, first)  # "best trial" in its output: it ran to the end
    _record(outcome, code, text)
    return check_journal(study_dir, outcome)
