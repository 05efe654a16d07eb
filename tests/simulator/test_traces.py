"""Trace files: round trip, precise errors, and traces built from a real local study."""

from __future__ import annotations

import json
import math
from pathlib import Path

import h5py
import numpy as np
import pytest

from hpctune.api import open_study
from hpctune.cli import main
from hpctune.simulator.traces import FORMAT_VERSION, Trace, TraceError
from hpctune.study.states import TrialStatus
from tests.conftest import DIGITS, run_hpctune, write_study


def _trace() -> Trace:
    curves = np.array([[0.2, 0.5, 0.7], [0.1, 0.15, np.nan], [0.3, 0.9, 0.95]])
    seconds = np.array([[1.0, 1.5, 2.0], [0.5, 0.5, np.nan], [2.0, 2.0, 2.0]])
    hparams = ({"lr": 0.1, "sched": {"schedule": "cosine", "base": 0.1}}, {"lr": 0.2}, {})
    return Trace(curves, seconds, hparams, "acc", "max", 0.1, source="hand-made")


def test_round_trip_keeps_everything(tmp_path: Path) -> None:
    trace = _trace()
    path = trace.save(tmp_path / "sub" / "t.h5")
    again = Trace.load(path)
    np.testing.assert_array_equal(again.curves, trace.curves)
    np.testing.assert_array_equal(again.epoch_seconds, trace.epoch_seconds)
    assert again.hparams == trace.hparams
    assert (again.metric, again.mode, again.random_level, again.source) == (
        "acc",
        "max",
        0.1,
        "hand-made",
    )
    with h5py.File(path) as f:
        assert f.attrs["format_version"] == FORMAT_VERSION
        assert json.loads(f["hparams"][0]) == trace.hparams[0]
    assert not list(path.parent.glob(".*tmp"))


def test_summaries() -> None:
    trace = _trace()
    assert trace.lengths().tolist() == [3, 2, 3]
    np.testing.assert_allclose(trace.best_values(), [0.7, 0.15, 0.95])
    assert trace.default_target(0.5) == pytest.approx(0.7)
    low = Trace(trace.curves, trace.epoch_seconds, trace.hparams, "loss", "min")
    np.testing.assert_allclose(low.best_values(), [0.2, 0.1, 0.3])
    assert low.default_target(1.0) == pytest.approx(0.1)
    assert math.isnan(low.random_level)
    sub = trace.subset([2, 0])
    assert sub.hparams == (trace.hparams[2], trace.hparams[0])
    np.testing.assert_array_equal(sub.curves[1], trace.curves[0])


def _write(path: Path, **datasets: object) -> Path:
    base: dict[str, object] = {
        "curves": np.zeros((2, 3)),
        "epoch_seconds": np.ones((2, 3)),
        "hparams": np.array(["{}", "{}"], dtype=object),
    }
    base.update(datasets)
    with h5py.File(path, "w") as f:
        for name, data in base.items():
            if data is not None:
                if name == "hparams":
                    f.create_dataset(name, data=data, dtype=h5py.string_dtype())
                else:
                    f.create_dataset(name, data=data)
        f.attrs.update(metric="acc", mode="max", random_level=0.1, format_version=1)
    return path


@pytest.mark.parametrize(
    ("datasets", "message"),
    [
        ({"curves": None}, "dataset 'curves' is missing"),
        ({"epoch_seconds": None}, "dataset 'epoch_seconds' is missing"),
        ({"curves": np.zeros(3)}, "dataset 'curves' must be 2-D"),
        ({"epoch_seconds": np.ones((2, 4))}, "dataset 'epoch_seconds' must have the shape"),
        ({"epoch_seconds": -np.ones((2, 3))}, "dataset 'epoch_seconds' must be finite"),
        ({"hparams": np.array(["{}"], dtype=object)}, "dataset 'hparams' must hold one entry"),
        ({"hparams": np.array(["{}", "{x"], dtype=object)}, "'hparams' entry 1 is not JSON"),
        ({"hparams": np.array(["{}", "[1]"], dtype=object)}, "entry 1 must be a JSON object"),
    ],
)
def test_load_errors_name_the_file_and_the_dataset(
    tmp_path: Path, datasets: dict[str, object], message: str
) -> None:
    path = _write(tmp_path / "bad.h5", **datasets)
    with pytest.raises(TraceError, match=message) as err:
        Trace.load(path)
    assert str(path) in str(err.value)
    assert err.value.exit_code == 2


def test_load_errors_for_files_and_attributes(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="does not exist"):
        Trace.load(tmp_path / "nope.h5")
    (tmp_path / "text.h5").write_text("not hdf5")
    with pytest.raises(TraceError, match="not a readable HDF5"):
        Trace.load(tmp_path / "text.h5")
    path = _write(tmp_path / "attr.h5")
    with h5py.File(path, "a") as f:
        del f.attrs["mode"]
    with pytest.raises(TraceError, match="attribute 'mode' is missing"):
        Trace.load(path)
    with h5py.File(path, "a") as f:
        f.attrs["mode"] = "up"
    with pytest.raises(TraceError, match="'mode' must be 'max' or 'min'"):
        Trace.load(path)
    with h5py.File(path, "a") as f:
        f.attrs["mode"] = "max"
        f.attrs["format_version"] = FORMAT_VERSION + 1
    with pytest.raises(TraceError, match="upgrade hpctune"):
        Trace.load(path)


def test_the_committed_digits_trace_is_complete() -> None:
    trace = Trace.load(Path(__file__).resolve().parents[2] / "benchmarks/traces/digits.h5")
    assert trace.curves.shape == (128, 30)
    assert (trace.lengths() == 30).all()
    assert (trace.metric, trace.mode, trace.random_level) == ("val_accuracy", "max", 0.1)
    assert np.all((trace.curves > 0) & (trace.curves <= 1))
    assert np.all(trace.epoch_seconds > 0)
    assert {"hidden", "lr", "activation"} <= set(trace.hparams[0])


@pytest.mark.slow
def test_from_study_and_export_trace_on_a_real_local_study(
    tmp_path: Path, cleanup_studies: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write_study(
        tmp_path,
        train=DIGITS / "train.py",
        metric="val_accuracy",
        max_steps=3,
        num_trials=4,
        space={
            "hidden": {"type": "int", "low": 16, "high": 64, "log": True},
            "layers": 1,
            "dropout": 0.1,
            "momentum": 0.9,
            "weight_decay": 1e-4,
            "batch_size": 32,
            "activation": ["relu", "tanh"],
            "lr": {"type": "float", "low": 0.05, "high": 0.2},
        },
    )
    study_dir = tmp_path / "study"
    cleanup_studies.append(study_dir)
    run_hpctune("launch", str(spec), "--local", check=True)
    study = open_study(study_dir)
    assert [t.status for t in study.trials] == [TrialStatus.COMPLETED] * 4

    out = tmp_path / "trace.h5"
    assert main(["export-trace", str(study_dir), str(out), "--random-level", "0.1"]) == 0
    assert "4 configurations x 3 epochs (4 ran to the end)" in capsys.readouterr().out
    trace = Trace.load(out)
    assert trace.curves.shape == (4, 3)
    assert (trace.metric, trace.mode, trace.random_level) == ("val_accuracy", "max", 0.1)
    for trial in study.trials:
        curve = study.curve(trial.trial_id)
        np.testing.assert_array_equal(trace.curves[trial.trial_id], curve.values)
        assert trace.hparams[trial.trial_id] == trial.params
        within = np.diff(curve.times)  # steps 2 and 3: time since the previous report
        np.testing.assert_allclose(trace.epoch_seconds[trial.trial_id, 1:], within)
        # step 1: the median of the trial's other steps, not the worker's start-up
        assert trace.epoch_seconds[trial.trial_id, 0] == pytest.approx(np.median(within))
    assert np.all(trace.epoch_seconds > 0)
    assert np.all(trace.epoch_seconds < 10)

    assert main(["export-trace", str(tmp_path), str(tmp_path / "x.h5")]) == 2
    assert "not a study directory" in capsys.readouterr().err
