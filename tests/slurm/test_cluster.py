"""The local Slurm cluster works for submitit: results, arrays, fake GPUs, cancel,
preemption with checkpoint/requeue, and sacct. Real jobs, no mocks.

Needs ``tests/slurm/cluster.sh up`` first (docs/slurm-dev-cluster.md).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cloudpickle
import pytest
import submitit

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(120)]

# The jobs cannot import this test module: ship its functions and classes by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

MakeExecutor = Callable[..., submitit.SlurmExecutor]


# ---------------------------------------------------------------- helpers run in jobs


def add(a: int, b: int) -> int:
    return a + b


def square_at_barrier(x: int, barrier: Path, n: int, patience_s: float) -> dict[str, Any]:
    """Square ``x`` after waiting (up to ``patience_s``) until all ``n`` tasks have
    started: a file barrier, so the check needs concurrency, not a fast machine."""
    env = submitit.JobEnvironment()
    (barrier / f"started-{x}").touch()
    deadline = time.monotonic() + patience_s
    while len(list(barrier.glob("started-*"))) < n and time.monotonic() < deadline:
        time.sleep(0.1)
    return {
        "square": x * x,
        "array_task_id": env.array_task_id,
        "met": len(list(barrier.glob("started-*"))),
    }


def gpu_env() -> dict[str, str | None]:
    return {
        name: os.environ.get(name)
        for name in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS", "SLURM_JOB_PARTITION")
    }


def partition_after(seconds: float) -> str:
    time.sleep(seconds)
    return os.environ["SLURM_JOB_PARTITION"]


class HalfThenWait(submitit.helpers.Checkpointable):
    """Counts to ``n_steps``; in its first run it stops half way and waits to be
    preempted. Each run records (SLURM_RESTART_COUNT, step at start): a restored
    checkpoint resumes at the half, a plain restart would begin again at 0."""

    def __init__(self, n_steps: int, waiting_file: Path) -> None:
        self.n_steps = n_steps
        self.waiting_file = waiting_file
        self.step = 0
        self.starts: list[tuple[int, int]] = []

    def __call__(self) -> dict[str, Any]:
        restart_count = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
        self.starts.append((restart_count, self.step))
        while self.step < self.n_steps:
            if restart_count == 0 and self.step >= self.n_steps // 2:
                self.waiting_file.touch()
                time.sleep(0.1)  # USR2 from the preemption interrupts this
                continue
            self.step += 1
        return {"step": self.step, "starts": self.starts, "restart_count": restart_count}


# ---------------------------------------------------------------- test helpers


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.2)


def sacct_state(job: submitit.Job[Any]) -> str:
    """The job's state as sacct reports it now (bypasses submitit's cache)."""
    return str(job.get_info(mode="force").get("State", "UNKNOWN"))


def wait_state(job: submitit.Job[Any], prefix: str, timeout: float = 20) -> str:
    """Wait until sacct reports a state starting with ``prefix`` (e.g. ``CANCELLED by 0``)."""
    seen: list[str] = []

    def reached() -> str | None:
        seen.append(sacct_state(job))
        return seen[-1] if seen[-1].startswith(prefix) else None

    try:
        return str(wait_for(reached, timeout, f"job {job.job_id} to reach {prefix}"))
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last state {seen[-1:]}") from None


# ---------------------------------------------------------------- tests


def test_submit_returns_result(make_executor: MakeExecutor) -> None:
    job = make_executor().submit(add, 2, 3)
    assert job.result() == 5
    wait_state(job, "COMPLETED")


@pytest.mark.timeout(240)
def test_map_array_runs_eight_tasks_at_once(
    make_executor: MakeExecutor, submitit_folder: Path
) -> None:
    # CPUs=8 (config_overrides) on a 2-core machine: 8 one-CPU tasks run concurrently,
    # so every task sees all 8 at the barrier; with fewer slots the first ones would wait
    # out their patience and report fewer.
    n = 8
    barrier = submitit_folder / "barrier"
    barrier.mkdir()
    jobs = make_executor().map_array(
        square_at_barrier, range(n), [barrier] * n, [n] * n, [150.0] * n
    )
    assert len(jobs) == n
    assert len({job.job_id.split("_")[0] for job in jobs}) == 1, "one Slurm job array"
    results = [job.result() for job in jobs]
    assert [r["square"] for r in results] == [x * x for x in range(n)]
    assert sorted(int(r["array_task_id"]) for r in results) == list(range(n))
    assert [r["met"] for r in results] == [n] * n, "all 8 tasks should run at once"


def test_gres_gpu_sets_cuda_visible_devices(make_executor: MakeExecutor) -> None:
    one = make_executor(gres="gpu:1").submit(gpu_env)
    four = make_executor(gres="gpu:4").submit(gpu_env)
    none = make_executor().submit(gpu_env)
    env_one, env_four, env_none = one.result(), four.result(), none.result()
    assert env_one["CUDA_VISIBLE_DEVICES"] is not None
    assert len(env_one["CUDA_VISIBLE_DEVICES"].split(",")) == 1
    assert env_one["CUDA_VISIBLE_DEVICES"].isdigit()
    assert env_four["CUDA_VISIBLE_DEVICES"] is not None
    assert sorted(env_four["CUDA_VISIBLE_DEVICES"].split(",")) == ["0", "1", "2", "3"]
    assert env_none["CUDA_VISIBLE_DEVICES"] is None


def test_cancel_gives_cancelled_state(make_executor: MakeExecutor) -> None:
    job = make_executor().submit(time.sleep, 300)
    wait_state(job, "RUNNING")
    job.cancel()
    state = wait_state(job, "CANCELLED", timeout=15)
    assert state.startswith("CANCELLED")
    assert job.done(force_check=True)


@pytest.mark.timeout(300)
def test_preempted_checkpointable_requeues_and_resumes(
    make_executor: MakeExecutor, submitit_folder: Path, slurm_cluster: Any
) -> None:
    waiting_file = submitit_folder / "first-run-waiting"
    n_steps = 1000
    # timeout_min > 10, else submitit takes every USR2 for a timeout. 8 CPUs: the whole
    # node, so the job on the high partition can start only by preempting this one.
    low = make_executor(partition="debug", cpus_per_task=8, time=20).submit(
        HalfThenWait(n_steps, waiting_file)
    )
    # The whole node: it starts once earlier tests' jobs have left it (slow under load).
    wait_for(waiting_file.exists, 180, "the low-priority job to reach its half")

    high = make_executor(partition="high", cpus_per_task=1, time=5).submit(partition_after, 2)
    assert high.result() == "high"

    result = low.result()
    assert result["step"] == n_steps
    assert result["restart_count"] >= 1  # SLURM_RESTART_COUNT in the resumed run
    assert result["starts"][0] == (0, 0)
    assert result["starts"][-1] == (result["restart_count"], n_steps // 2), (
        "the resumed run must start from the checkpointed state"
    )
    wait_state(low, "COMPLETED")

    # sacct keeps the preempted run as a duplicate record of the same job id
    records = slurm_cluster.run(
        "sacct", "-D", "-X", "-n", "-P", "-o", "JobID,State,Partition", "-j", low.job_id
    )
    states = [line.split("|")[1] for line in records.splitlines() if line]
    assert any(s.startswith(("PREEMPTED", "REQUEUED")) for s in states), states


def test_sacct_reports_jobs(make_executor: MakeExecutor, slurm_cluster: Any) -> None:
    clusters = slurm_cluster.run("sacctmgr", "-n", "-P", "list", "cluster", "format=Cluster")
    assert "hpctune" in clusters.split()
    job = make_executor().submit(add, 1, 1)
    assert job.result() == 2

    def completed_record() -> str | None:
        out = slurm_cluster.run(
            "sacct", "-X", "-n", "-P", "-o", "JobID,State,Partition,ExitCode", "-j", job.job_id
        )
        line = out.strip()
        return line if line.endswith("|COMPLETED|debug|0:0") else None

    record = wait_for(completed_record, 20, f"sacct to report job {job.job_id} COMPLETED")
    assert record.startswith(f"{job.job_id}|")
