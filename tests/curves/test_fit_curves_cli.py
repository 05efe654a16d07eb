"""``hpctune fit-curves`` on the digits trace: the JSON list, the table, the plot, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from hpctune.analysis.curve_fits import load_curves
from hpctune.cli import main
from hpctune.curves import FitOptions, fit_many
from hpctune.curves.service import curve_fit_seed
from hpctune.simulator.traces import Trace

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "benchmarks" / "traces" / "digits.h5"
KEYS = {
    "trial",
    "n",
    "x_max",
    "metric",
    "mode",
    "bounds",
    "last",
    "final",
    "unknown",
    "reason",
    "threshold",
    "seed",
    "q05",
    "q25",
    "median",
    "q75",
    "q95",
    "p_threshold",
}


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_rows_and_plot_on_the_digits_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = Trace.load(DIGITS)
    plot = tmp_path / "fits.png"
    code, out, _ = _run(
        capsys,
        "fit-curves",
        str(DIGITS),
        "--trial",
        "3",
        "--trial",
        "40",
        "--at-epoch",
        "8",
        "--threshold",
        "0.95",
        "--json",
        "--plot",
        str(plot),
    )
    assert code == 0
    rows = json.loads(out)
    assert [r["trial"] for r in rows] == [3, 40]
    for row in rows:
        assert set(row) == KEYS
        curve = trace.curves[row["trial"]]
        assert (row["n"], row["x_max"], row["mode"], row["bounds"]) == (8, 30, "max", [0.0, 1.0])
        assert row["last"] == pytest.approx(curve[7], abs=1e-6)
        assert row["final"] == pytest.approx(curve[29], abs=1e-6)
        assert row["threshold"] == 0.95
        assert not row["unknown"]
        qs = [row[k] for k in ("q05", "q25", "median", "q75", "q95")]
        assert qs == sorted(qs)
        assert 0.0 <= row["p_threshold"] <= 1.0
        # the same fit as fit_many with the documented seed (seed base 0 for a trace)
        assert row["seed"] == curve_fit_seed(0, row["trial"], 8)
        (expected,) = fit_many([_request(trace, row["trial"], 8, row["seed"])], FitOptions())
        assert row["median"] == pytest.approx(float(expected.median[-1]), abs=2e-6)
        assert row["p_threshold"] == pytest.approx(expected.prob_final_at_least(0.95), abs=2e-6)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot.stat().st_size > 10_000


def _request(trace: Trace, trial: int, n: int, seed: int) -> object:
    from hpctune.curves import CurveRequest

    return CurveRequest(key=trial, y=tuple(trace.curves[trial, :n]), x_max=30, seed=seed)


def test_table_mode_min_and_a_complete_curve(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the digits curves as an error rate (mode min), with bounds stored in the trace
    trace = Trace.load(DIGITS).subset([5])
    error = Trace(
        1.0 - trace.curves,
        trace.epoch_seconds,
        trace.hparams,
        "val_error",
        "min",
        metric_bounds=(0.0, 1.0),
    )
    path = error.save(tmp_path / "error.h5")
    code, out, _ = _run(capsys, "fit-curves", str(path), "--at-epoch", "10", "--threshold", "0.05")
    assert code == 0
    assert "P(final <= thr)" in out
    assert "val_error (min)" in out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("0 ")]
    cells = line.split()
    assert cells[1] == "10"
    median, q05, q95 = float(cells[3]), float(cells[4]), float(cells[7])
    assert q05 <= median <= q95  # quantiles of the error, in its own direction
    assert median < 0.2
    # the whole curve observed: nothing left to predict, said so, not an error
    code, out, _ = _run(capsys, "fit-curves", str(path), "--json")
    assert code == 0
    (row,) = json.loads(out)
    assert row["unknown"]
    assert row["median"] is None
    assert "no epoch left" in row["reason"]
    assert row["final"] == pytest.approx(1.0 - Trace.load(DIGITS).curves[5, 29], abs=1e-6)


def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    not_hdf5 = tmp_path / "notes.txt"
    not_hdf5.write_text("hello")
    no_curves = tmp_path / "empty.h5"
    with h5py.File(no_curves, "w") as f:
        f.create_dataset("curves", data=np.zeros((2, 3)))
    cases = {
        "does not exist": ["fit-curves", str(tmp_path / "missing.h5")],
        "not a readable HDF5": ["fit-curves", str(not_hdf5)],
        "dataset 'epoch_seconds' is missing": ["fit-curves", str(no_curves)],
        "not a study directory": ["fit-curves", str(tmp_path)],
        "no curve 500": ["fit-curves", str(DIGITS), "--trial", "500"],
        "--at-epoch must be >= 1": ["fit-curves", str(DIGITS), "--at-epoch", "0"],
        "--workers must be >= 0": ["fit-curves", str(DIGITS), "--workers", "-1"],
        "--bounds must be": ["fit-curves", str(DIGITS), "--bounds", "1", "0"],
        "Invalid value for '--budget'": ["fit-curves", str(DIGITS), "--budget", "fast"],
    }
    for message, argv in cases.items():
        code, out, err = _run(capsys, *argv)
        assert code == 2, (argv, out, err)
        assert message in err, (message, err)
    assert load_curves(DIGITS).top_threshold() == pytest.approx(
        np.quantile(Trace.load(DIGITS).best_values(), 0.9)
    )


@pytest.mark.parametrize("model", ["amortised", "domhan"])
def test_fits_report_progress_and_the_bar_draws_it(model: str) -> None:
    import io

    from rich.console import Console

    from hpctune.analysis.curve_fits import fit_curves
    from hpctune.analysis.progress_bar import progress_bar

    curves = load_curves(DIGITS)
    ids = list(curves.ids[:3])
    out = io.StringIO()
    counts: list[int] = []
    with progress_bar(len(ids), "fitting", console=Console(file=out, force_terminal=True)) as bar:

        def fitted(n: int) -> None:
            counts.append(n)
            bar("curves", n)

        rows, _ = fit_curves(
            curves, trials=ids, at_epoch=4, model=model, budget="fast", on_fitted=fitted
        )
    assert [row["trial"] for row in rows] == ids
    # the amortised model fits all in one pass; MCMC without workers reports each curve
    assert counts == ([3] if model == "amortised" else [1, 1, 1])
    assert "fitting" in out.getvalue()
    assert "3/3" in out.getvalue()
