"""The [slurm] section, the controller's sbatch script (golden file) and the worker parameters.

These need no cluster: they check what hpctune would submit. What Slurm does with it is tested
against the real local cluster in tests/slurm/.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from hpctune.backends import WorkerState
from hpctune.errors import StudySpecError
from hpctune.slurm.controller_job import format_time, render_controller_script
from hpctune.slurm.executor import worker_parameters
from hpctune.slurm.options import SlurmSpec, parse_mem, parse_slurm, parse_time, slurm_spec
from hpctune.slurm.queue import classify
from hpctune.spec import load_spec
from hpctune.wire.layout import StudyPaths
from tests.conftest import write_study

GOLDEN = Path(__file__).parents[1] / "assets" / "controller.sbatch.golden"
SLURM = {
    "partition": "gpu",
    "account": "proj",
    "time": "04:00:00",
    "mem": "16G",
    "setup": ["module load cuda"],
    "extra": {"exclude": "node3", "exclusive": True},
    "signal_delay_s": 120,
    "controller": {
        "partition": "cpu",
        "cpus": 2,
        "qos": "long",
        "time": "2-00:00:00",
        "mem": "2G",
        "setup": ["module load python"],
    },
}


def _spec(tmp_path: Path) -> Path:
    return write_study(
        tmp_path,
        train="def train(ctx):\n    pass\n",
        space={"x": 1.0},
        name="golden",
        directory="/shared/studies/golden",
        resources={"slots": 4, "cpus_per_worker": 8, "gpus_per_worker": 1},
        slurm=SLURM,
    )


def test_the_controller_script_matches_the_golden_file(tmp_path: Path) -> None:
    spec = load_spec(_spec(tmp_path))
    env = {"PYTHONPATH": "/shared/my code", "HPCTUNE_LOG_LEVEL": "DEBUG", "HOME": "/home/u"}
    script = render_controller_script(
        StudyPaths(spec.directory), spec, python="/opt/venv/bin/python", env=env
    )
    if os.environ.get("HPCTUNE_UPDATE_GOLDEN"):
        GOLDEN.write_text(script)
    assert script == GOLDEN.read_text(), (
        "the controller's sbatch script changed; if on purpose, rerun with "
        "HPCTUNE_UPDATE_GOLDEN=1 and review the diff of tests/assets/controller.sbatch.golden"
    )


def test_worker_parameters_follow_the_spec(tmp_path: Path) -> None:
    env = {"SLURM_CONF": "/etc/site/slurm.conf", "HPCTUNE_POLL_INTERVAL": "0.5", "PATH": "/bin"}
    params = worker_parameters(load_spec(_spec(tmp_path)), env=env)
    assert params["partition"] == "gpu"
    assert params["account"] == "proj"
    assert params["time"] == 240
    assert params["mem"] == "16384M"
    assert params["cpus_per_task"] == 8
    assert params["gpus_per_node"] == 1
    assert params["signal_delay_s"] == 120
    assert params["array_parallelism"] == 4
    assert params["setup"] == [
        "export OMP_NUM_THREADS=8 MKL_NUM_THREADS=8 HPCTUNE_DEVICES=1",
        "export SLURM_CONF=/etc/site/slurm.conf HPCTUNE_POLL_INTERVAL=0.5",
        "module load cuda",
    ]
    assert params["srun_args"] == ["--export=ALL"]  # the step sees what the script set
    assert params["additional_parameters"] == {
        "requeue": True,
        "exclude": "node3",
        "exclusive": True,
    }


def test_worker_parameters_of_a_sized_worker(tmp_path: Path) -> None:
    """A worker of the elastic plan's size ``devices`` holds that many GPUs with their CPUs; one
    of a node's devices or more asks for whole nodes, exclusively, one task per node."""
    spec = load_spec(_spec(tmp_path))
    params = worker_parameters(spec, env={}, devices=2)
    assert (params["gpus_per_node"], params["cpus_per_task"]) == (2, 16)
    assert params["setup"][0] == "export OMP_NUM_THREADS=16 MKL_NUM_THREADS=16 HPCTUNE_DEVICES=2"
    assert "exclusive" not in params
    assert "nodes" not in params
    nodes = dataclasses.replace(
        spec, resources=dataclasses.replace(spec.resources, node_devices=4)
    )
    assert "exclusive" not in worker_parameters(nodes, env={}, devices=2)
    whole = worker_parameters(nodes, env={}, devices=4)
    assert (whole["gpus_per_node"], whole["cpus_per_task"], whole["nodes"]) == (4, 32, 1)
    assert whole["exclusive"] is True
    assert whole["ntasks_per_node"] == 1
    two = worker_parameters(nodes, env={}, devices=8)
    assert (two["gpus_per_node"], two["cpus_per_task"], two["nodes"]) == (4, 32, 2)
    assert two["setup"][0].endswith("HPCTUNE_DEVICES=8")  # the trial sees all eight
    assert worker_parameters(nodes, env={}) == worker_parameters(spec, env={})  # unsized


def test_slurm_spec_round_trips_and_defaults(tmp_path: Path) -> None:
    spec = load_spec(_spec(tmp_path))
    slurm = slurm_spec(spec)
    assert SlurmSpec.from_dict(slurm.to_dict()) == slurm
    assert slurm.controller.time_min == 2 * 24 * 60
    assert parse_slurm({}, tmp_path) == SlurmSpec()


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        (30, 30),
        ("30", 30),
        ("1:30", 2),
        ("04:00:00", 240),
        ("1-12", 2160),
        ("1-00:30", 1470),
        ("2-00:00:01", 2881),
    ],
)
def test_slurm_times(text: object, minutes: int) -> None:
    assert parse_time(text, None, "slurm.time") == minutes


@pytest.mark.parametrize("text", [0, -5, "", "4h", "1:2:3:4", True, 1.5, "0:00"])
def test_bad_slurm_times_name_the_field(text: object) -> None:
    with pytest.raises(StudySpecError, match=r"slurm\.time") as err:
        parse_time(text, Path("s.toml"), "slurm.time")
    assert err.value.field == "slurm.time"


def test_memory_sizes() -> None:
    assert parse_mem("16G", None, "m") == 16.0
    assert parse_mem("512M", None, "m") == 0.5
    assert parse_mem("1T", None, "m") == 1024.0
    assert parse_mem(2, None, "m") == 2.0
    for bad in ("lots", "-1G", 0, "16X"):
        with pytest.raises(StudySpecError):
            parse_mem(bad, None, "m")


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({"partiton": "gpu"}, "slurm.partiton"),
        ({"controller": {"tme": 3}}, "slurm.controller.tme"),
        ({"setup": "module load x"}, "slurm.setup"),
        ({"max_pending": 0}, "slurm.max_pending"),
        ({"extra": {"a": [1]}}, "slurm.extra"),
        ({"partition": ""}, "slurm.partition"),
        ({"controller": 3}, "slurm.controller"),
        ({"cpus": 4}, "slurm.cpus"),
        ({"controller": {"cpus": 0}}, "slurm.controller.cpus"),
    ],
)
def test_bad_slurm_sections_name_the_field(
    tmp_path: Path, table: dict[str, object], field: str
) -> None:
    with pytest.raises(StudySpecError) as err:
        parse_slurm(table, tmp_path / "study.toml")
    assert err.value.field == field


def test_format_time() -> None:
    assert format_time(90) == "0-01:30:00"
    assert format_time(2 * 24 * 60 + 5) == "2-00:05:00"


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("RUNNING", WorkerState.RUNNING),
        ("COMPLETING", WorkerState.RUNNING),
        ("PENDING", WorkerState.PENDING),
        ("REQUEUED", WorkerState.PENDING),
        ("CANCELLED by 0", WorkerState.GONE),
        ("COMPLETED", WorkerState.GONE),
        ("NODE_FAIL", WorkerState.GONE),
        ("OUT_OF_MEMORY", WorkerState.GONE),
        ("", WorkerState.UNKNOWN),
        ("SOMETHING_NEW", WorkerState.UNKNOWN),
    ],
)
def test_slurm_states(state: str, expected: WorkerState) -> None:
    assert classify(state) is expected
