"""Fixtures for tests that run against the real local Slurm cluster.

Start the cluster first with ``tests/slurm/cluster.sh up`` (see docs/slurm-dev-cluster.md);
these fixtures never start it themselves and fail, rather than skip, when it is not up.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import submitit

CLUSTER_SH = Path(__file__).resolve().with_name("cluster.sh")
UP_HINT = "run tests/slurm/cluster.sh up"


@dataclass(frozen=True)
class SlurmCluster:
    """The running local cluster: the environment its clients need and a command runner.

    Tests marked ``site`` run against either variant of ``cluster.sh`` (``default`` and
    ``site``): they take partition names and GPU counts from here, never hard-coded.
    """

    env: dict[str, str]

    @property
    def variant(self) -> str:
        """``default`` or ``site`` (HPCTUNE_SLURM_VARIANT)."""
        return self.env.get("HPCTUNE_SLURM_VARIANT", "default")

    @property
    def accounting(self) -> bool:
        """True when sacct works (the default variant has slurmdbd)."""
        return self.variant == "default"

    def run(self, *args: str, timeout: float = 30) -> str:
        """Run a Slurm client command (sacct, squeue, ...) and return its stdout."""
        proc = subprocess.run(
            list(args), capture_output=True, text=True, timeout=timeout, check=False
        )
        if proc.returncode != 0:
            raise AssertionError(f"{shlex.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc.stdout

    def partitions(self) -> list[dict[str, str]]:
        """``scontrol show partition`` as one dict of fields per partition."""
        out = self.run("scontrol", "show", "partition", "-o")
        return [
            dict(word.split("=", 1) for word in line.split() if "=" in word)
            for line in out.splitlines()
            if line.strip()
        ]

    @property
    def default_partition(self) -> str:
        """The default (preemptible) partition."""
        return next(p["PartitionName"] for p in self.partitions() if p.get("Default") == "YES")

    @property
    def preempting_partition(self) -> str:
        """The partition with the highest PriorityTier (its jobs preempt the default's)."""
        return max(self.partitions(), key=lambda p: int(p.get("PriorityTier", 0)))["PartitionName"]

    def max_time_min(self, partition: str) -> int:
        """A partition's MaxTime in minutes."""
        from hpctune.slurm.options import parse_time

        (part,) = [p for p in self.partitions() if p["PartitionName"] == partition]
        return parse_time(part["MaxTime"], None, "MaxTime")

    @property
    def gpus(self) -> int:
        """Fake GPUs on the node."""
        match = re.search(r"Gres=gpu:(\d+)", self.run("scontrol", "show", "node", "-o"))
        assert match, "the node has no GPUs"
        return int(match.group(1))


def _parse_exports(text: str) -> dict[str, str]:
    """Parse the ``export NAME=value`` lines printed by ``cluster.sh env``."""
    env: dict[str, str] = {}
    for line in text.splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            name, value = words[1].split("=", 1)
            env[name] = value
    return env


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """The local Slurm cluster; fails the test if it is not up."""
    try:
        status = subprocess.run(
            ["bash", str(CLUSTER_SH), "status"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"cannot check the local Slurm cluster ({exc}): {UP_HINT}", pytrace=False)
    if status.returncode != 0:
        pytest.fail(
            f"the local Slurm cluster is not up: {UP_HINT}\n{status.stdout}{status.stderr}",
            pytrace=False,
        )
    env_out = subprocess.run(
        ["bash", str(CLUSTER_SH), "env"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    env = _parse_exports(env_out)
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        yield SlurmCluster(env=env)


@pytest.fixture
def accounting_cluster(slurm_cluster: SlurmCluster) -> SlurmCluster:
    """The local cluster with sacct (the default variant); fails on the site variant."""
    if not slurm_cluster.accounting:
        pytest.fail(
            f"this test needs sacct, which the {slurm_cluster.variant!r} variant has not: "
            "run it against the default variant (tests/slurm/cluster.sh up)",
            pytrace=False,
        )
    return slurm_cluster


@pytest.fixture
def submitit_folder(tmp_path: Path) -> Path:
    """A fresh submitit folder per test: job ids repeat after ``cluster.sh down --wipe``,
    and a reused folder would hand back a stale result for a repeated id."""
    folder = tmp_path / "submitit"
    folder.mkdir()
    return folder


@pytest.fixture
def make_executor(
    slurm_cluster: SlurmCluster, submitit_folder: Path
) -> Iterator[Callable[..., submitit.SlurmExecutor]]:
    """Factory for SlurmExecutors writing to this test's submitit folder.

    Defaults: partition ``debug``, 1 CPU, 5 min limit; keyword arguments override them.
    At teardown, jobs of this test still queued or running are cancelled, so a failed
    test cannot hold the node's CPUs for the tests after it.
    """

    def make(**params: Any) -> submitit.SlurmExecutor:
        executor = submitit.SlurmExecutor(folder=submitit_folder / "%j")
        executor.update_parameters(
            **{"partition": "debug", "cpus_per_task": 1, "time": 5, **params}
        )
        return executor

    yield make

    # submitit names each job's folder after its id ("%j"): 12, or 12_3 in an array
    job_ids = sorted(
        p.name for p in submitit_folder.iterdir() if p.is_dir() and p.name[:1].isdigit()
    )
    if job_ids:
        subprocess.run(["scancel", *job_ids], capture_output=True, timeout=30, check=False)


@pytest.fixture
def study_name(request: pytest.FixtureRequest, slurm_cluster: Any) -> Iterator[str]:
    """A study name unique to the test; its Slurm jobs are cancelled at teardown."""
    name = re.sub(r"[^A-Za-z0-9]", "", request.node.name)[-40:]
    yield name
    for job_name in (f"hpctune-{name}", f"hpctune-{name}-controller"):
        subprocess.run(["scancel", "--name", job_name], capture_output=True, timeout=30)
