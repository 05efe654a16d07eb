"""Benchmark the journal path: report latency, controller ingest throughput, study load time.

    python benchmarks/journal.py            # full sizes
    python benchmarks/journal.py --quick    # small sizes (CI smoke run)
    python benchmarks/journal.py --json     # only the JSON line

Measured in one run on this machine:

(a) ``TrialContext.report()`` latency (p50/p99) with an event file in a temporary directory,
    boundary=1 (every report fsyncs and looks for a decision) and boundary=10;
(b) the controller's ingest throughput: writer processes append report lines to their own
    segment event files while the real :class:`Controller` runs its ``_ingest`` + ``_commit``
    loop on a study made by ``create_study``;
(c) the time to open a study of N trials x E epochs with ``open_study`` and read every curve.

Only light imports live at module level: the writer processes are started with ``spawn``.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hpctune.wire.eventlog import EventWriter

SPEC = """\
[study]
name = "bench"
directory = "study"
entry_point = "train.py:train"
metric = "acc"
mode = "max"
max_steps = {max_steps}
boundary = {boundary}
num_trials = {num_trials}
seed = 0

[search_space]
lr = {{ type = "float", low = 1e-4, high = 1e-1, log = true }}

[resources]
slots = {slots}
"""

TRAIN = "def train(ctx):\n    pass\n"


def _percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, by linear interpolation."""
    data = sorted(values)
    pos = (len(data) - 1) * q / 100
    low = math.floor(pos)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (pos - low)


def _make_spec(folder: Path, *, max_steps: int, boundary: int, trials: int) -> Any:
    """Write a study.toml (and its train.py) into ``folder`` and load it."""
    from hpctune.spec import load_spec

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text(TRAIN)
    text = SPEC.format(max_steps=max_steps, boundary=boundary, num_trials=trials, slots=trials)
    (folder / "study.toml").write_text(text)
    return load_spec(folder / "study.toml")


# -- (a) report latency ---------------------------------------------------------------------------


def bench_report(tmp: Path, reports: int, boundary: int) -> dict[str, float]:
    """Time ``reports`` calls of ``TrialContext.report`` with the given boundary."""
    from hpctune.wire.protocol import Assignment
    from hpctune.worker.context import TrialContext

    study = tmp / f"report-b{boundary}"
    assignment = Assignment(
        segment_id=0,
        trial_id=0,
        params={"lr": 0.01},
        seed=0,
        start_step=0,
        until_step=reports,
        max_steps=reports,
        boundary=boundary,
        metric="acc",
        mode="max",
        entry={"file": "train.py", "module": None, "function": "train"},
        decision_wait=0.0,
    )
    latencies: list[float] = []
    with EventWriter(study / "events" / "segment-000000.jsonl") as events:
        ctx = TrialContext(
            assignment,
            study_dir=study,
            events=events,
            checkpoint_path=lambda step: study / "checkpoints" / f"step-{step}.pt",
            decision_file=study / "decisions" / "segment-000000.json",
        )
        for step in range(1, reports + 1):
            start = time.perf_counter()
            ctx.report(step=step, acc=step / reports, loss=1.0 / step)
            latencies.append(time.perf_counter() - start)
    return {
        "p50_us": _percentile(latencies, 50) * 1e6,
        "p99_us": _percentile(latencies, 99) * 1e6,
        "mean_us": sum(latencies) / len(latencies) * 1e6,
    }


# -- (b) ingest throughput ------------------------------------------------------------------------


def _writer_main(
    path: str, index: int, reports: int, boundary: int, ready: Any, go: Any, ends: Any
) -> None:
    """Writer process: a segment's start, ``reports`` report lines and its end."""
    events = EventWriter(Path(path))
    ready.release()
    go.wait()
    events.write({"kind": "start", "t": time.time(), "host": "bench", "pid": os.getpid()})
    for step in range(1, reports + 1):
        record = {
            "kind": "report",
            "t": time.time(),
            "step": step,
            "metrics": {"acc": step / reports, "loss": 1.0 / step},
        }
        events.write(record, fsync=step % boundary == 0)
    events.write(
        {"kind": "end", "t": time.time(), "status": "completed", "step": reports},
        fsync=True,
    )
    events.close()
    ends[index] = time.time()


def bench_ingest(tmp: Path, writers: int, reports: int, boundary: int) -> dict[str, float]:
    """Drive the real controller's ingestion while ``writers`` processes append reports."""
    from hpctune.backends.local import local_executor
    from hpctune.controller import Controller
    from hpctune.controller.launch import create_study
    from hpctune.journal import records as rec

    spec = _make_spec(tmp / "ingest", max_steps=reports, boundary=boundary, trials=writers)
    paths = create_study(spec)
    controller = Controller(paths.root, lambda s: local_executor(paths, s))
    controller.start()
    for i in range(writers):
        controller.core.log(rec.TrialCreatedEntry(params={"lr": 0.01}, seed=i), trial=i)
        assigned = rec.SegmentAssignedEntry(worker=f"w{i:04d}", start_step=0, until_step=reports)
        controller.core.log(assigned, trial=i, segment=i)
    controller.core.commit()

    ctx = mp.get_context("spawn")
    ready = ctx.Semaphore(0)
    go = ctx.Event()
    ends = ctx.Array("d", writers)
    procs = [
        ctx.Process(
            target=_writer_main,
            args=(str(paths.event_file(i)), i, reports, boundary, ready, go, ends),
        )
        for i in range(writers)
    ]
    for proc in procs:
        proc.start()
    try:
        for _ in procs:  # every writer has imported and opened its file
            if not ready.acquire(timeout=120):
                raise RuntimeError("a writer process did not start")
        iterations = 0
        go.set()
        start = time.perf_counter()
        start_wall = time.time()
        cpu_start = time.process_time()
        while controller.state.active_segments():
            controller.core.ingest.ingest()
            controller.core.pending_events.clear()  # policy work is not part of this measurement
            controller.core.commit()
            iterations += 1
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu_start
    finally:
        go.set()
        for proc in procs:
            proc.join(timeout=60)
            if proc.is_alive():
                proc.kill()
    if any(proc.exitcode != 0 for proc in procs):
        raise RuntimeError("a writer process failed")
    rows = int(controller.core.writer.lengths["metrics"])
    if rows != writers * reports:
        raise RuntimeError(f"ingested {rows} reports, expected {writers * reports}")
    records = writers * (reports + 2)
    controller.core.executor.close()
    return {
        "writers": writers,
        "records": records,
        "seconds": elapsed,
        "records_per_s": records / elapsed,
        "writers_seconds": max(max(ends[:]) - start_wall, 1e-9),
        "records_per_cpu_s": records / max(cpu, 1e-9),
        "iterations": iterations,
        "commits": int(controller.core.writer.state["commit"]),
    }


# -- (c) study load -------------------------------------------------------------------------------


def build_study(tmp: Path, trials: int, epochs: int) -> Path:
    """Build the journal of a finished study of ``trials`` x ``epochs`` directly."""
    from hpctune.controller.launch import create_study
    from hpctune.files import dumps
    from hpctune.journal import state as st
    from hpctune.journal.store import JournalWriter

    spec = _make_spec(tmp / "load", max_steps=epochs, boundary=1, trials=trials)
    paths = create_study(spec)
    writer = JournalWriter(paths.journal)
    t = time.time()

    def log(kind: str, trial: int, segment: int, **data: Any) -> None:
        writer.append("log", kind=kind, trial=trial, segment=segment, time=t, data=dumps(data))

    for trial in range(trials):
        log(st.TRIAL_CREATED, trial, -1, params={"lr": 1e-3 * (1 + trial % 7)}, seed=trial)
        log(
            st.SEGMENT_ASSIGNED,
            trial,
            trial,
            worker=f"w{trial % 64:04d}",
            start_step=0,
            until_step=epochs,
            checkpoint_row=None,
        )
        log(st.SEGMENT_STARTED, trial, trial, host="bench", pid=1)
        for epoch in range(1, epochs + 1):
            acc = 1 - 0.5 / epoch - 1e-4 * (trial % 101)
            writer.append_metrics(trial, trial, epoch, t + epoch, {"acc": acc, "loss": 1 / epoch})
        log(st.SEGMENT_ENDED, trial, trial, status="completed", step=epochs, reason="last step")
        log(st.TRIAL_STATUS, trial, -1, status="completed", reason="last step")
        if trial % 100 == 99:
            writer.commit()
    writer.commit()
    return paths.root


def bench_load(tmp: Path, trials: int, epochs: int) -> dict[str, float]:
    """Time ``open_study`` and reading every trial's curve."""
    from hpctune import open_study

    start = time.perf_counter()
    root = build_study(tmp, trials, epochs)
    built = time.perf_counter() - start

    start = time.perf_counter()
    study = open_study(root)
    opened = time.perf_counter() - start
    start = time.perf_counter()
    points = sum(len(study.curve(trial.trial_id)) for trial in study.trials)
    curves = time.perf_counter() - start
    if points != trials * epochs:
        raise RuntimeError(f"read {points} curve points, expected {trials * epochs}")
    start = time.perf_counter()
    other = sum(len(study.curve(trial.trial_id, "loss")) for trial in study.trials)
    other_curves = time.perf_counter() - start
    if other != trials * epochs:
        raise RuntimeError(f"read {other} loss points, expected {trials * epochs}")
    return {
        "trials": trials,
        "epochs": epochs,
        "build_s": built,
        "open_s": opened,
        "curves_s": curves,
        "other_metric_curves_s": other_curves,
        "total_s": opened + curves,
    }


# -- main -----------------------------------------------------------------------------------------


def run(quick: bool) -> dict[str, Any]:
    """Run the three benchmarks; return their figures."""
    sizes = (
        {"reports": 300, "writers": 8, "per_writer": 100, "trials": 50, "epochs": 20}
        if quick
        else {"reports": 2000, "writers": 64, "per_writer": 3000, "trials": 1000, "epochs": 100}
    )
    tmp = Path(tempfile.mkdtemp(prefix="hpctune-bench-"))
    try:
        b1 = bench_report(tmp, sizes["reports"], boundary=1)
        b10 = bench_report(tmp, sizes["reports"], boundary=10)
        ingest = bench_ingest(tmp, sizes["writers"], sizes["per_writer"], boundary=10)
        load = bench_load(tmp, sizes["trials"], sizes["epochs"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "quick": quick,
        "cpus": os.cpu_count(),
        "report_reports": sizes["reports"],
        "report_b1_p50_us": b1["p50_us"],
        "report_b1_p99_us": b1["p99_us"],
        "report_b10_p50_us": b10["p50_us"],
        "report_b10_p99_us": b10["p99_us"],
        "ingest_writers": ingest["writers"],
        "ingest_records": ingest["records"],
        "ingest_seconds": ingest["seconds"],
        "ingest_records_per_s": ingest["records_per_s"],
        "ingest_writers_seconds": ingest["writers_seconds"],
        "ingest_records_per_cpu_s": ingest["records_per_cpu_s"],
        "ingest_iterations": ingest["iterations"],
        "load_trials": load["trials"],
        "load_epochs": load["epochs"],
        "load_build_s": load["build_s"],
        "load_open_s": load["open_s"],
        "load_curves_s": load["curves_s"],
        "load_other_metric_curves_s": load["other_metric_curves_s"],
        "load_total_s": load["total_s"],
    }


def print_table(r: dict[str, Any]) -> None:
    """Print the figures and a few ratios for people."""
    print(f"hpctune journal benchmark ({'quick' if r['quick'] else 'full'}, {r['cpus']} CPUs)")
    print()
    print(f"(a) TrialContext.report(), {r['report_reports']} reports")
    print(f"    {'boundary':>10} {'p50 µs':>10} {'p99 µs':>10} {'p99/p50':>8}")
    for b in (1, 10):
        p50, p99 = r[f"report_b{b}_p50_us"], r[f"report_b{b}_p99_us"]
        print(f"    {b:>10} {p50:>10.1f} {p99:>10.1f} {p99 / p50:>8.1f}")
    print(
        f"    p50 boundary=1 / boundary=10: {r['report_b1_p50_us'] / r['report_b10_p50_us']:.1f}x"
    )
    print()
    rate = r["ingest_records_per_s"]
    print(f"(b) controller ingest, {r['ingest_writers']} writer processes")
    print(f"    records ingested        {r['ingest_records']:>12,}")
    print(f"    wall time               {r['ingest_seconds']:>12.2f} s")
    print(f"    throughput (wall)       {rate:>12,.0f} records/s")
    print(f"    per controller CPU s    {r['ingest_records_per_cpu_s']:>12,.0f} records/s")
    print(f"    last writer done after  {r['ingest_writers_seconds']:>12.2f} s")
    print(f"    controller iterations   {r['ingest_iterations']:>12,}")
    print(f"    per writer (wall)       {rate / r['ingest_writers']:>12,.0f} records/s")
    share = rate / r["ingest_records_per_cpu_s"]
    print(f"    controller CPU / wall   {share:>12.0%} (the rest: writers on the same CPUs)")
    print()
    n = r["load_trials"]
    print(f"(c) open_study, {n} trials x {r['load_epochs']} epochs")
    print(f"    build journal           {r['load_build_s']:>12.2f} s")
    print(f"    open_study              {r['load_open_s']:>12.3f} s")
    print(f"    every curve (metric)    {r['load_curves_s']:>12.3f} s")
    print(f"    every curve (other)     {r['load_other_metric_curves_s']:>12.3f} s")
    print(f"    per trial, open+curve   {r['load_total_s'] / n * 1e3:>12.3f} ms")
    print(
        f"    other-metric curves / open_study: "
        f"{r['load_other_metric_curves_s'] / r['load_open_s']:.1f}x"
    )
    print()


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for CI")
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args(argv)
    results = run(args.quick)
    if not args.json:
        print_table(results)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
