"""`hpctune plan-elastic --partition`: the billing weight from a real partition's
TRESBillingWeights, as `scontrol show partition` gives it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hpctune.cli import main
from hpctune.elastic import Profile
from tests.conftest import DIGITS, write_study
from tests.slurm.conftest import SlurmCluster

pytestmark = pytest.mark.slurm


def test_plan_elastic_bills_by_the_partitions_weights(
    tmp_path: Path,
    slurm_cluster: SlurmCluster,
    study_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    node = slurm_cluster.run("scontrol", "show", "node", "-o").split()[0].split("=", 1)[1]
    name = f"bill{study_name[-12:]}"
    weights = "CPU=1.0,Mem=0.25G,GRES/gpu=2.0"
    slurm_cluster.run(
        "scontrol", "create", f"PartitionName={name}", f"Nodes={node}",
        f"TRESBillingWeights={weights}",
    )  # fmt: skip
    try:
        spec = write_study(
            tmp_path,
            train=DIGITS / "train.py",
            num_trials=9,
            max_steps=9,
            policy={"name": "sha", "bracket_size": 9},
            space={"lr": 0.1},
            resources={"slots": 2, "cpus_per_worker": 4, "gpus_per_worker": 1},
            slurm={"mem": "8G"},
        )
        profile = Profile.scaling(2.0, {2: 1.8}).save(tmp_path / "profile.json")
        args = ["plan-elastic", str(spec), "--deadline", "1h", "--profile", str(profile)]
        capsys.readouterr()
        assert main([*args, "--partition", name, "--json"]) == 0
        cost = json.loads(capsys.readouterr().out)["cost_model"]
        # one GPU with its 4 CPUs and 8 GB: 4 x 1.0 + 8 x 0.25 + 2.0
        assert cost["billing_weight"] == pytest.approx(8.0)
        assert weights in cost["billing_source"]
        assert main([*args, "--partition", name]) == 0
        assert f"billing: 8 units per GPU-hour (TRESBillingWeights of partition {name}" in (
            capsys.readouterr().out
        )
        assert main([*args, "--partition", "nosuchpartition"]) == 2
        assert "nosuchpartition is not known" in capsys.readouterr().err
    finally:
        slurm_cluster.run("scontrol", "delete", f"PartitionName={name}")
        shutil.rmtree(tmp_path / "study", ignore_errors=True)
