"""Benchmark ``hpctune report`` (and the exports) on a large finished study.

    python benchmarks/report.py                 # 1,000 trials x 100 steps (goal: report < 10 s)
    python benchmarks/report.py --quick         # 60 x 20 (CI smoke run)
    python benchmarks/report.py --json          # only the JSON line

The study's journal is built with the project's own code: ``create_study`` from a real spec
(8 searched parameters, a schedule among them, the random generator's configurations) and a
``JournalWriter`` fed the record kinds the controller writes (trials created, segments assigned,
started and ended, metric rows, checkpoint rows, workers and their runs, trial and study states),
each also folded into a ``StudyRecord`` as the controller does, so an invalid record fails here.
Trials end completed (80 %), terminated early by a policy (15 %) or failed (5 %).

Printed: the time to build the journal, then ``hpctune report`` end to end in a fresh process
(import, journal read, fANOVA importance, PNGs, page), its phases measured in this process, and
the CSV, HDF5 and Optuna exports.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

SPEC = """\
[study]
name = "bench-report"
directory = "study"
entry_point = "train.py:train"
metric = "val_loss"
mode = "min"
max_steps = {steps}
num_trials = {trials}
seed = 0

[search_space]
hidden = {{ type = "int", low = 16, high = 1024, log = true }}
layers = [1, 2, 3]
dropout = {{ type = "float", low = 0.0, high = 0.5 }}
momentum = {{ type = "float", low = 0.5, high = 0.99 }}
weight_decay = {{ type = "float", low = 1e-6, high = 1e-2, log = true }}
batch_size = [32, 64, 128]
activation = ["relu", "tanh", "gelu"]

[search_space.lr]
type = "schedule"
shape = "cosine"
base = {{ type = "float", low = 1e-4, high = 1.0, log = true }}
total_steps = {steps}

[resources]
slots = 8
gpus_per_worker = 1
"""
GOAL_S = 10.0


def build_study(folder: Path, trials: int, steps: int, seed: int = 0) -> Path:
    """Create the study with ``create_study`` and write its journal with ``JournalWriter``."""
    from hpctune.controller.launch import create_study
    from hpctune.files import dumps
    from hpctune.journal import state as st
    from hpctune.journal.state import CheckpointRef, StudyRecord
    from hpctune.journal.store import JournalWriter
    from hpctune.policies.generators import make_generator
    from hpctune.spec import load_spec
    from hpctune.study.seeding import component_seed

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text("def train(ctx):\n    pass\n")
    (folder / "study.toml").write_text(SPEC.format(trials=trials, steps=steps))
    spec = load_spec(folder / "study.toml")
    paths = create_study(spec)
    writer = JournalWriter(paths.journal)
    record = StudyRecord(spec=spec.to_dict())
    generator = make_generator(
        spec.generator.name, spec.generator.options, spec.space, component_seed(0, "generator")
    )
    rng = np.random.default_rng(seed)
    t0 = time.time() - trials * steps * 0.05
    clock = [t0]

    def log(kind: str, trial: int = -1, segment: int = -1, **data: Any) -> None:
        text = dumps(data)
        writer.append("log", kind=kind, trial=trial, segment=segment, time=clock[0], data=text)
        record.apply(kind, trial, segment, clock[0], json.loads(text))

    log(st.STUDY, state="running", reason="controller started")
    workers = [f"w{i:04d}" for i in range(8)]
    for w in workers:
        log(st.WORKER, worker=w, event="started")
        log(st.WORKER, worker=w, event="submitted", info={"job": w})
        log(st.WORKER, worker=w, event="running", since=clock[0])
    for trial in range(trials):
        params = generator.suggest(trial)
        log(st.TRIAL_CREATED, trial, params=params, generator_index=trial, seed=trial)
        worker = workers[trial % len(workers)]
        log(st.SEGMENT_ASSIGNED, trial, trial, worker=worker, start_step=0, until_step=steps,
            checkpoint_row=None)  # fmt: skip
        log(st.SEGMENT_STARTED, trial, trial, host="bench", pid=1, at=clock[0])
        fate = rng.random()
        end = steps if fate < 0.80 else int(rng.integers(3, steps))
        floor = 0.05 + 2.0 * abs(math.log10(params["lr"]["base"]) + 1.5) / 3
        rate = 5 + 30 * rng.random()
        for step in range(1, end + 1):
            clock[0] += 0.05
            loss = floor + 2.5 * math.exp(-step / rate) + 0.02 * rng.standard_normal()
            writer.append_metrics(trial, trial, step, clock[0],
                                  {"val_loss": loss, "val_accuracy": 1 - loss / 3})  # fmt: skip
            record.add_report(trial, step, clock[0], loss)
            if step % 10 == 0 or step == end:
                path = f"checkpoints/trial-{trial:06d}/step-{step:08d}.pt"
                row = writer.next_index("checkpoints")
                ref = CheckpointRef(row, trial, trial, step, clock[0], 1000, "0" * 64, path)
                writer.append("checkpoints", trial=trial, segment=trial, step=step,
                              time=clock[0], nbytes=1000, sha256="0" * 64, path=path)  # fmt: skip
                record.add_checkpoint(ref)
        if fate < 0.80:
            status, reason = "completed", "reached max_steps"
        elif fate < 0.95:
            status, reason = "terminated", "stopped by the policy (below the median)"
        else:
            status, reason = "failed", "RuntimeError: CUDA out of memory"
        segment_status = status if status != "failed" else "failed"
        log(st.SEGMENT_ENDED, trial, trial, status=segment_status, step=end, reason=reason,
            at=clock[0])  # fmt: skip
        extra = {"error": f"Traceback ...\n{reason}"} if status == "failed" else {}
        log(st.TRIAL_STATUS, trial, status=status, reason=reason, **extra)
        if trial % 100 == 99:
            writer.commit()
    for w in workers:
        log(st.WORKER, worker=w, event="down", at=clock[0])
        log(st.WORKER, worker=w, event="exited", reason="study finished")
    log(st.STUDY, state="finished", reason="no trial left to run")
    writer.commit()
    return paths.root


def _timed(fn: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def importance_check(study: Any) -> dict[str, float]:
    """The largest difference between the report's fANOVA shares and Optuna's defaults (64 trees
    of depth 64 on every completed trial), and the time of each."""
    import optuna
    from optuna.importance import FanovaImportanceEvaluator

    from hpctune.analysis.importance import parameter_importance
    from hpctune.analysis.optuna_trials import in_memory_study

    fast, fast_s = _timed(lambda: parameter_importance(study)["importance"])
    target = in_memory_study(study)
    full, full_s = _timed(
        lambda: optuna.importance.get_param_importances(
            target, evaluator=FanovaImportanceEvaluator(seed=0), params=list(fast)
        )
    )
    diff = max(abs(fast[k] - float(full[k])) for k in fast)
    return {"importance_max_diff": round(diff, 4), "importance_report_s": round(fast_s, 2),
            "importance_defaults_s": round(full_s, 2)}  # fmt: skip


def run(trials: int, steps: int, check_importance: bool = False) -> dict[str, Any]:
    """Build the study, time the report and the exports; return the figures."""
    tmp = Path(tempfile.mkdtemp(prefix="hpctune-report-bench-"))
    try:
        root, build_s = _timed(lambda: build_study(tmp, trials, steps))
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "hpctune.cli", "report", str(root), "--out", str(tmp / "r")],
            check=True,
            capture_output=True,
        )
        cli_s = time.perf_counter() - start
        from hpctune.api import open_study
        from hpctune.export.csv_files import write_csv
        from hpctune.export.hdf5 import write_hdf5
        from hpctune.export.optuna_journal import write_optuna_journal
        from hpctune.report.data import report_data
        from hpctune.report.html import render_page
        from hpctune.report.pngs import write_pngs

        study, open_s = _timed(lambda: open_study(root))
        data, data_s = _timed(lambda: report_data(study))
        (tmp / "p").mkdir()
        pngs, png_s = _timed(lambda: write_pngs(study, data, tmp / "p"))
        page, page_s = _timed(lambda: render_page(data, pngs))
        _, csv_s = _timed(lambda: write_csv(study, tmp / "csv"))
        _, h5_s = _timed(lambda: write_hdf5(study, tmp / "s.h5"))
        _, optuna_s = _timed(lambda: write_optuna_journal(study, tmp / "s.optuna.log"))
        check = importance_check(study) if check_importance else {}
        return {
            **check,
            "trials": trials,
            "steps": steps,
            "build_s": round(build_s, 2),
            "report_cli_s": round(cli_s, 2),
            "report_goal_s": GOAL_S,
            "open_s": round(open_s, 2),
            "data_s": round(data_s, 2),
            "png_s": round(png_s, 2),
            "page_s": round(page_s, 3),
            "page_mb": round(len(page) / 1e6, 2),
            "export_csv_s": round(csv_s, 2),
            "export_hdf5_s": round(h5_s, 2),
            "export_optuna_s": round(optuna_s, 2),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="60 trials x 20 steps")
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument(
        "--check-importance",
        action="store_true",
        help="also compare the report's fANOVA with Optuna's defaults on all trials (slow)",
    )
    args = parser.parse_args(argv)
    trials, steps = (60, 20) if args.quick else (args.trials, args.steps)
    figures = run(trials, steps, args.check_importance)
    if not args.json:
        print(f"study: {trials} trials x {steps} steps, journal built in {figures['build_s']} s")
        print(
            f"hpctune report (fresh process, end to end): {figures['report_cli_s']} s "
            f"(goal < {GOAL_S:g} s: {'met' if figures['report_cli_s'] < GOAL_S else 'missed'})"
        )
        print(
            f"  in process: open_study {figures['open_s']} s, data (incl. fANOVA) "
            f"{figures['data_s']} s, PNGs {figures['png_s']} s, page {figures['page_s']} s "
            f"({figures['page_mb']} MB)"
        )
        print(
            f"exports: csv {figures['export_csv_s']} s, hdf5 {figures['export_hdf5_s']} s, "
            f"optuna {figures['export_optuna_s']} s"
        )
        if args.check_importance:
            print(
                f"fANOVA shares: largest difference to Optuna's defaults "
                f"{figures['importance_max_diff']} ({figures['importance_report_s']} s against "
                f"{figures['importance_defaults_s']} s)"
            )
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
