"""The worker loop on a simulated clock: the controller's silence is judged on the worker's
clock, which also stamps its heartbeats, with no real waiting."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from hpctune.files import write_json_atomic
from hpctune.simulator import SimClock
from hpctune.wire.layout import StudyPaths
from hpctune.wire.protocol import Heartbeat
from hpctune.worker.loop import Worker
from hpctune.worker.process import _batch_step_age, _process_age


def _worker(tmp_path: Path, clock: SimClock) -> tuple[Worker, StudyPaths]:
    root = tmp_path / "study"
    root.mkdir(mode=0o700)
    worker = Worker(root, "w0001", poll_interval=0.5, controller_timeout=120.0, clock=clock)
    return worker, StudyPaths.of(root)


def test_a_worker_without_a_controller_exits_after_the_timeout_of_its_own_clock(
    tmp_path: Path,
) -> None:
    clock = SimClock(start=1_000_000.0)
    worker, paths = _worker(tmp_path, clock)
    started = worker.heartbeat.beat.started
    assert 1_000_000.0 - 60.0 <= started <= 1_000_000.0  # the process start, on its clock
    assert worker.run() == 0
    # it gave up once the controller had been silent for more than 120 s of its clock (a
    # worker reading or waiting on the wall clock would not have moved this clock at all)
    assert 120.0 < clock.now() - started <= 121.0
    beat = Heartbeat.read(paths.heartbeat("w0001"))
    assert beat is not None
    assert beat.state == "exited"
    assert beat.time == clock.now()


def test_a_worker_with_a_live_controller_keeps_waiting_on_its_clock(tmp_path: Path) -> None:
    clock = SimClock(start=1_000_000.0)
    worker, paths = _worker(tmp_path, clock)
    next_beat = [1_000_000.0]

    def controller_beats(seconds: float) -> None:  # the controller beats every 60 s until 600 s
        SimClock.sleep(clock, seconds)
        if next_beat[0] <= clock.now() <= 1_000_600.0:
            write_json_atomic(paths.controller_file, {"time": clock.now()})
            next_beat[0] += 60.0

    clock.sleep = controller_beats  # type: ignore[method-assign]
    assert worker.run() == 0
    last = 1_000_600.0  # the controller's last beat (the clock moves in steps of 0.5 s)
    # the worker left once that beat was 120 s old, not while the controller beat
    assert last + 120.0 < clock.now() <= last + 121.0


def _titled_process(
    tmp_path: Path,
    title: str,
    program: str = "sleep",
    args: str = "60",
    env: dict[str, str] | None = None,
) -> subprocess.Popen[str]:
    """A process whose executable is named ``slurmstepd`` (a copy of ``program``) and whose
    title is ``title`` (how Slurm's step daemon shows in ``/proc``), run with ``args``."""
    exe = tmp_path / program / "slurmstepd"
    if not exe.exists():
        exe.parent.mkdir(exist_ok=True)
        shutil.copy(shutil.which(program) or f"/bin/{program}", exe)
    command = f'exec -a "{title}" {exe} {args}'
    return subprocess.Popen(["bash", "-c", command], stdout=subprocess.PIPE, text=True, env=env)


# prints how far process_start_time() is from the start of job 987's batch step, and from the
# start of the process itself
OFFSETS = """
import time
from hpctune.worker.process import _batch_step_age, _process_age, process_start_time
now, started = time.time(), process_start_time()
print(started - (now - _batch_step_age("987")), started - (now - _process_age("self")))
"""


def test_a_run_in_a_slurm_job_starts_at_its_batch_step(tmp_path: Path) -> None:
    """A worker that is a Slurm step's task (started by ``slurmstepd``) starts its run at its
    job's batch step (as sacct counts it), not at its own start; another job's step does not
    count; a worker started otherwise (the local executor, even inside an allocation) or
    without a visible step starts at its own start."""
    other = _titled_process(tmp_path, "slurmstepd: [98.batch]")
    time.sleep(0.5)
    ours = _titled_process(tmp_path, "slurmstepd: [987.batch]")
    try:
        time.sleep(1.5)  # the two steps started after this process, 98 before 987
        own_age, other_age = _process_age("self"), _batch_step_age("98")
        step_age = _batch_step_age("987")
        assert own_age is not None
        assert other_age is not None
        assert step_age is not None
        assert 1.2 <= step_age < other_age < own_age
        script = tmp_path / "offsets.py"
        script.write_text(OFFSETS)
        # a step's task: its parent is a slurmstepd (here a second one of job 987)
        env = {**os.environ, "SLURM_JOB_ID": "987"}
        args = f'-c "{sys.executable} {script}; true"'
        task = _titled_process(tmp_path, "slurmstepd: [987.0]", "bash", args, env)
        out, _ = task.communicate(timeout=120)
        to_step, to_self = (float(v) for v in out.split())
        assert abs(to_step) < 0.5
        assert to_self < -1.0  # the batch step started well before the task
        # the local executor's worker in the same job, and a job whose step is not visible
        for job in ("987", "9876"):
            env = {**os.environ, "SLURM_JOB_ID": job}
            out = subprocess.run(
                [sys.executable, str(script)], env=env, capture_output=True, text=True, check=True
            ).stdout
            assert abs(float(out.split()[1])) < 0.5, job
    finally:
        for proc in (other, ours):
            proc.kill()
            proc.wait()
