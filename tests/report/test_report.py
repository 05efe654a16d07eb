"""hpctune report, export, compare, best and status --watch on one small real study.

The study (the behaviours workload: 4 trials complete, 4 fail with a traceback, 4 diverge and
are terminated) runs once for the module; the report is opened in a real headless Chromium
from file://, every export is read back by the tool it is for (Optuna's JournalStorage and
optuna-dashboard's own loading code, h5py through hpctune's read API, TensorBoard's event
reader, MLflow's client).
"""

from __future__ import annotations

import copy
import io
import json
import math
import tomllib
from pathlib import Path
from wsgiref.util import setup_testing_defaults

import numpy as np
import pytest

from hpctune.analysis.progress import LINE_WIDTH, LiveProgress, completion_line
from hpctune.api import Study, open_study
from hpctune.study.states import StudyState, TrialStatus
from tests.browser import open_report
from tests.conftest import WORKLOADS, kill_workers, run_hpctune, write_study

BEHAVIOURS = WORKLOADS / "behaviours.py"
XS = [0.25, 0.5, 1.0, 2.0]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Study, str]:
    folder = tmp_path_factory.mktemp("report")
    spec = write_study(
        folder,
        train=BEHAVIOURS,
        num_trials=12,
        max_steps=5,
        generator={"name": "grid"},
        # a long fixed parameter: completion lines must still fit 100 columns
        space={"behaviour": ["ok", "raise", "nan"], "x": XS, "boost": 10.0, "note": "n" * 150},
    )
    try:
        result = run_hpctune("launch", str(spec), "--local", check=True)
    finally:
        kill_workers(folder / "study")
    return open_study(folder / "study"), result.stdout


def test_launch_prints_one_short_line_per_trial_and_the_final_line_once(
    finished: tuple[Study, str],
) -> None:
    study, out = finished
    assert study.record.state is StudyState.FINISHED
    lines = out.splitlines()
    ended = [line for line in lines if line.startswith("trial ") and " at step " in line]
    assert len(ended) == 12
    assert all(len(line) <= LINE_WIDTH for line in ended)
    assert not any("nnnnnnnn" in line for line in ended)  # parameters only on request
    assert sum(line.startswith("finished | trials 12/12 done") for line in lines) == 1
    failed = [line for line in ended if " failed " in line]
    assert len(failed) == 4
    assert all("ValueError: bad value in trial" in line for line in failed)


def test_best_is_a_completed_trial_with_its_checkpoint(finished: tuple[Study, str]) -> None:
    study, _ = finished
    best = study.best_trial()
    assert best is not None
    assert best.status is TrialStatus.COMPLETED
    assert best.params["x"] == max(XS)
    assert best.params["behaviour"] == "ok"
    # a diverged trial reported larger values than any completed one: it cannot be the best
    peaks = {t.trial_id: study.best_value(t.trial_id) for t in study.trials}
    assert max(peaks.values()) > best.value
    assert best.step == 5
    assert best.checkpoint is not None
    assert best.checkpoint.is_file()
    result = run_hpctune("best", str(study.directory), check=True)
    toml = tomllib.loads(result.stdout)
    assert toml["search_space"] == best.params
    assert f"checkpoint: {best.checkpoint}" in result.stdout
    data = json.loads(run_hpctune("best", str(study.directory), "--json", check=True).stdout)
    assert (data["trial"], data["step"], data["checkpoint"]) == (
        best.trial_id,
        5,
        str(best.checkpoint),
    )


def test_the_read_api_raises_on_unknown_trials_and_metrics(finished: tuple[Study, str]) -> None:
    study, _ = finished
    with pytest.raises(KeyError, match="its metrics are score, total"):
        study.curve(0, "nope")
    with pytest.raises(KeyError, match=r"no trial 99 .* its trials are 0\.\.11"):
        study.curve(99)
    with pytest.raises(KeyError, match="no trial 99"):
        study.checkpoint_path(99)


def test_the_report_loads_in_chromium_with_every_section(
    finished: tuple[Study, str], tmp_path: Path
) -> None:
    study, _ = finished
    out = tmp_path / "report"
    run_hpctune("report", str(study.directory), "--out", str(out), check=True)
    assert (out / "plotly.min.js").is_file()
    for png in ("best_so_far.png", "curves.png", "importance.png", "slices.png"):
        assert (out / png).stat().st_size > 1500, png
    load = open_report(out / "index.html", tmp_path / "shots")
    assert load.errors == []
    assert load.failed == []
    assert all(url.startswith("file://") for url in load.requested), load.requested
    assert set(load.sections) == {
        "overview", "progress", "curves", "importance", "slices", "failures", "trials",
    }  # fmt: skip
    assert load.plots["progress"] == 2
    assert load.plots["curves"] == 1
    assert load.plots["importance"] == 2  # fANOVA and the parallel coordinates
    assert load.plots["slices"] == 2  # one per searched parameter (behaviour, x)
    for shot in load.sections.values():
        assert shot.stat().st_size > 3000
    page = (out / "index.html").read_text()
    assert "ValueError: bad value in trial" in page  # the failures with their reasons
    assert "diverged" in page


def test_export_optuna_opens_in_optuna_and_in_optuna_dashboard(
    finished: tuple[Study, str], tmp_path: Path
) -> None:
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalStorage
    from optuna.trial import TrialState
    from optuna_dashboard._app import create_app
    from optuna_dashboard._storage_url import get_storage

    study, _ = finished
    path = tmp_path / "study.optuna.log"
    run_hpctune(
        "export", str(study.directory), "--format", "optuna", "--out", str(path), check=True
    )
    loaded = optuna.load_study(
        study_name="test", storage=JournalStorage(JournalFileBackend(str(path)))
    )
    states = {
        TrialStatus.COMPLETED: TrialState.COMPLETE,
        TrialStatus.FAILED: TrialState.FAIL,
        TrialStatus.TERMINATED: TrialState.PRUNED,
    }
    assert len(loaded.trials) == len(study.trials)
    for ours, theirs in zip(study.trials, loaded.trials, strict=True):
        assert theirs.user_attrs["hpctune.trial"] == ours.trial_id
        assert theirs.state is states[ours.status]
        assert theirs.params == {"behaviour": ours.params["behaviour"], "x": ours.params["x"]}
        assert json.loads(theirs.user_attrs["fixed.boost"]) == 10.0
        curve = study.curve(ours.trial_id)
        finite = {int(s): float(v) for s, v in zip(*curve, strict=True) if math.isfinite(v)}
        assert theirs.intermediate_values == finite
    assert loaded.best_trial.user_attrs["hpctune.trial"] == study.best_trial().trial_id

    # optuna-dashboard's own code: its storage loader and its web app's JSON API
    app = create_app(get_storage(str(path)))

    def get(url: str) -> dict:
        environ: dict = {"PATH_INFO": url, "REQUEST_METHOD": "GET"}
        setup_testing_defaults(environ)
        status: list[str] = []
        body = b"".join(app(environ, lambda s, h, e=None: status.append(s)))
        assert status[0].startswith("200"), (status, body[:300])
        return json.loads(body)

    studies = get("/api/studies")["study_summaries"]
    assert [s["study_name"] for s in studies] == ["test"]
    detail = get(f"/api/studies/{studies[0]['study_id']}")
    assert len(detail["trials"]) == len(study.trials)
    by_number = {t["number"]: t for t in detail["trials"]}
    for theirs in loaded.trials:
        shown = by_number[theirs.number]
        assert shown["state"].lower() == theirs.state.name.lower()
        shown_params = {p["name"]: p["param_external_value"] for p in shown["params"]}
        assert shown_params == {k: str(v) for k, v in theirs.params.items()}
        values = [(v["step"], v["value"]) for v in shown["intermediate_values"]]
        assert values == sorted(theirs.intermediate_values.items())


def test_export_hdf5_round_trips_through_the_read_api(
    finished: tuple[Study, str], tmp_path: Path
) -> None:
    import h5py

    study, _ = finished
    path = tmp_path / "study.h5"
    run_hpctune("export", str(study.directory), "--format", "hdf5", "--out", str(path), check=True)
    back = open_study(path)
    assert back.directory == study.directory
    assert [(t.trial_id, t.status, t.params, t.step) for t in back.trials] == [
        (t.trial_id, t.status, t.params, t.step) for t in study.trials
    ]
    for name in study.metric_names():
        for t in study.trials:
            a, b = study.curve(t.trial_id, name), back.curve(t.trial_id, name)
            assert np.array_equal(a.steps, b.steps)
            assert np.array_equal(a.values, b.values, equal_nan=True)
    assert back.best_trial() == study.best_trial()
    assert back.metrics_frame().equals(study.metrics_frame())
    with h5py.File(path) as f:  # self-describing for tools that do not speak hpctune
        assert f.attrs["format"] == "hpctune.study"
        score = next(k for k in f["curves"] if f["curves"][k].attrs["name"] == "score")
        grid = f["curves"][score][...]
        assert grid.shape == (12, 5)
        row = list(f["trials/id"][...]).index(study.best_trial().trial_id)
        assert np.array_equal(grid[row], study.curve(study.best_trial().trial_id).values)


def test_export_csv_tensorboard_and_mlflow(finished: tuple[Study, str], tmp_path: Path) -> None:
    import csv

    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    study, _ = finished
    best = study.best_trial()
    assert best is not None
    run_hpctune(
        "export", str(study.directory), "--format", "csv", "--out", str(tmp_path / "c"), check=True
    )
    with open(tmp_path / "c" / "trials.csv") as f:
        trials = list(csv.DictReader(f))
    assert [int(r["trial"]) for r in trials] == [t.trial_id for t in study.trials]
    assert trials[best.trial_id]["status"] == "completed"
    with open(tmp_path / "c" / "metrics.csv") as f:
        metrics = list(csv.DictReader(f))
    assert len(metrics) == len(study.metrics_frame())

    tb = tmp_path / "tb"
    run_hpctune(
        "export", str(study.directory), "--format", "tensorboard", "--out", str(tb), check=True
    )
    events = EventAccumulator(str(tb / f"trial-{best.trial_id:06d}")).Reload()
    scalars = events.Scalars("score")
    curve = study.curve(best.trial_id)
    assert [e.step for e in scalars] == curve.steps.tolist()
    assert np.allclose([e.value for e in scalars], curve.values)

    store = tmp_path / "mlruns"
    run_hpctune(
        "export", str(study.directory), "--format", "mlflow", "--out", str(store), check=True
    )
    import os

    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    try:
        client = MlflowClient(tracking_uri=store.as_uri())
        experiment = client.get_experiment_by_name("test")
        runs = client.search_runs([experiment.experiment_id], max_results=100)
        by_trial = {int(r.data.tags["hpctune.trial"]): r for r in runs}
        assert sorted(by_trial) == [t.trial_id for t in study.trials]
        run = by_trial[best.trial_id]
        assert run.info.status == "FINISHED"
        history = client.get_metric_history(run.info.run_id, "score")
        assert sorted(m.step for m in history) == curve.steps.tolist()
        failed = next(t for t in study.trials if t.status is TrialStatus.FAILED)
        assert by_trial[failed.trial_id].info.status == "FAILED"
    finally:
        os.environ.pop("MLFLOW_ALLOW_FILE_STORE", None)


def test_export_formats_come_from_one_registry_with_other_packages_formats(
    finished: tuple[Study, str], tmp_path: Path
) -> None:
    """Default names as documented; an unknown format exits 2 with the known ones; another
    package's format works by its entry point (hpctune.exports) or as MODULE:ATTRIBUTE."""
    import os
    import subprocess
    import sys

    from hpctune.export import default_path, find_format, format_names
    from tests.conftest import hpctune_env

    study, _ = finished
    expected = {"csv": "csv", "hdf5": "h5", "optuna": "optuna.log", "tensorboard": "tb"}
    expected["mlflow"] = "mlruns"
    for name, suffix in expected.items():
        path = default_path(study, find_format(name))
        assert path == study.directory / "export" / f"test.{suffix}"
    assert format_names()[:5] == list(expected)
    out = run_hpctune("export", str(study.directory), "--format", "csv", check=True).stdout
    folder = study.directory / "export" / "test.csv"
    assert out.splitlines() == [
        f"wrote {folder / 'trials.csv'}",
        f"wrote {folder / 'metrics.csv'}",
    ]
    wrong = run_hpctune("export", str(study.directory), "--format", "cvs")
    assert wrong.returncode == 2
    assert "did you mean 'csv'" in wrong.stderr
    assert "hdf5, optuna, tensorboard, mlflow" in wrong.stderr

    plugins = Path(__file__).resolve().parents[1] / "plugins"
    site = tmp_path / "site" / "hpctune_toy_export-0.1.dist-info"
    site.mkdir(parents=True)
    (site / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: hpctune-toy-export\nVersion: 0.1\n"
    )
    (site / "entry_points.txt").write_text("[hpctune.exports]\ntoy = hpctune_toy_export:TOY\n")
    path = os.pathsep.join([str(site.parent), str(plugins), os.environ.get("PYTHONPATH", "")])
    env = {**hpctune_env(), "PYTHONPATH": path}

    def export(fmt: str, *more: str) -> subprocess.CompletedProcess[str]:
        args = ["export", str(study.directory), "--format", fmt, *more]
        command = [sys.executable, "-m", "hpctune.cli", *args]
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)

    toy = export("toy")
    assert toy.returncode == 0, toy.stderr
    written = study.directory / "export" / "test.toy.json"
    assert toy.stdout.splitlines() == [f"wrote {written} (12 trials)"]
    assert json.loads(written.read_text()) == {"study": "test", "trials": list(range(12))}
    by_reference = export("hpctune_toy_export:TOY", "--out", str(tmp_path / "t.json"))
    assert by_reference.returncode == 0, by_reference.stderr
    assert json.loads((tmp_path / "t.json").read_text())["trials"] == list(range(12))
    refused = export("hpctune_toy_export:NOT_A_FORMAT")
    assert refused.returncode == 2
    assert "not an hpctune.export.ExportFormat" in refused.stderr


def test_compare_status_watch_and_the_live_display(
    finished: tuple[Study, str], tmp_path: Path
) -> None:
    study, _ = finished
    rows = json.loads(
        run_hpctune("compare", str(study.directory), str(study.directory), "--json").stdout
    )
    assert [r["best_trial"] for r in rows] == [study.best_trial().trial_id] * 2
    plot = tmp_path / "compare.png"
    out = run_hpctune("compare", str(study.directory), "--plot", str(plot), check=True).stdout
    assert "test" in out
    assert "default" in out
    assert plot.stat().st_size > 5000
    watch = run_hpctune("status", str(study.directory), "--watch", "--interval", "0.2", check=True)
    assert watch.stdout.count("finished | trials 12/12 done") == 1
    # the live display (as on a terminal) renders every state and ends without leaving a line
    screen = io.StringIO()
    progress = LiveProgress(screen, live=True)
    record = copy.deepcopy(study.record)
    record.state = StudyState.RUNNING  # as if it were still running
    progress.update(record)
    progress.close()
    assert "ETA" in screen.getvalue()
    long = completion_line(record, record.trials[0], width=LINE_WIDTH)
    assert len(long) <= LINE_WIDTH


def test_every_plot_without_matplotlib_exits_2_with_the_pip_command(
    finished: tuple[Study, str], tmp_path: Path
) -> None:
    import subprocess
    import sys

    from tests.conftest import hpctune_env

    shim = tmp_path / "shim" / "matplotlib"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('No module named matplotlib')\n")
    env = {**hpctune_env(), "PYTHONPATH": f"{shim.parent}:{Path.cwd()}"}
    study, _ = finished
    for args in (
        ["compare", str(study.directory), "--plot", str(tmp_path / "c.png")],
        ["lineage", str(study.directory), "--plot", str(tmp_path / "l.png")],
        ["report", str(study.directory), "--out", str(tmp_path / "r")],
    ):
        result = subprocess.run(
            [sys.executable, "-m", "hpctune.cli", *args], capture_output=True, text=True, env=env
        )
        assert result.returncode == 2, (args, result.stderr)
        assert "pip install 'hpctune[report]'" in result.stderr
    assert not (tmp_path / "r").exists()  # nothing half-written
