"""Real studies (not simulated): policies against each other on ``jobs/charlm`` or
``jobs/digits-cnn`` (issue 17).

For each repetition r (study seed r, the same for every policy, so every policy with the same
generator draws the same configurations in the same order) and each policy, runs the job with
``hpctune launch --local`` in a fresh directory and measures, from its journal, the wall-clock
seconds from the study's start to the first report at least as good as the target and the
worker-seconds held by then (each worker process from its start to its exit, cut at that time),
and the same for the whole study. The study is stopped (``hpctune stop``) once the target is
reached, since nothing after it counts; a study that never reaches it runs to its end. A policy
written ``hybrid+tpe`` runs with the ``tpe`` generator instead of the job's random search.

    nice -n 10 python benchmarks/real_policies.py [--job charlm|digits-cnn]
        [--policies hybrid asha] [--seeds 0 1 2] [--num-trials 32] [--max-steps 60]
        [--slots 2] [--target 2.0256] [--json]
    python benchmarks/real_policies.py --quick     # charlm, 4 trials x 3 steps, asha, seed 0

The default target is the job's trace's (``benchmarks/traces/JOB.h5``, recorded from the same
job: the value only the best 5 % of its configurations reach). Wall-clock depends on the
machine's load; the worker-seconds much less.
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

from _record_trace import replace_lines

REPO = Path(__file__).resolve().parent.parent
JOBS = ("charlm", "digits-cnn", "parity", "friedman", "cartpole")


def write_study(
    job: Path, folder: Path, policy: str, seed: int, num_trials: int, max_steps: int, slots: int
) -> Path:
    """A copy of ``job`` in ``folder`` with the policy (``name`` or ``name+generator``), seed,
    trials, steps and slots."""
    policy, _, generator = policy.partition("+")
    text = (job / "study.toml").read_text()
    replacements = {
        r"^directory = .*$": 'directory = "study"',
        r"^seed = \d+": f"seed = {seed}",
        r"^num_trials = \d+": f"num_trials = {num_trials}",
        r"^max_steps = \d+": f"max_steps = {max_steps}",
        r"^slots = \d+": f"slots = {slots}",
        r'^\[policy\]\nname = "default"': f'[policy]\nname = "{policy}"',
        r'^\[generator\]\nname = "random"': f'[generator]\nname = "{generator or "random"}"',
    }
    text = replace_lines(job / "study.toml", text, replacements)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    shutil.copy(job / "train.py", folder / "train.py")
    spec = folder / "study.toml"
    spec.write_text(text)
    return spec


def first_hit(record: Any, target: float, sign: float) -> float | None:
    """The time of the first report at least as good as ``target`` (``sign`` 1 for mode max,
    -1 for min), or None."""
    times = [
        t
        for trial in record.trials.values()
        for v, t in zip(trial.curve_values, trial.curve_times, strict=True)
        if sign * v >= sign * target
    ]
    return min(times) if times else None


def worker_seconds(record: Any, start: float, until: float) -> float:
    """Seconds worker processes were alive within [start, until]."""
    total = 0.0
    for worker in record.workers.values():
        runs = [(r.since, r.until) for r in worker.runs] or [
            (worker.started_time, worker.ended_time)
        ]
        for since, end in runs:
            end = until if end is None else min(end, until)
            total += max(0.0, end - max(since, start))
    return total


def run_study(
    folder: Path, target: float, sign: float, poll_s: float = 2.0, timeout_s: float = 1800.0
) -> dict[str, Any]:
    """Launch the study in ``folder``, stop it once the target is reached, return its figures."""
    from hpctune.api import open_study

    command = [
        sys.executable,
        "-m",
        "hpctune.cli",
        "launch",
        str(folder / "study.toml"),
        "--local",
    ]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        command, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    stopped = False
    while proc.poll() is None:
        time.sleep(poll_s)
        if time.monotonic() - t0 > timeout_s:
            proc.kill()
            raise SystemExit(f"{folder}: the study took more than {timeout_s} s")
        if stopped or not (folder / "study").is_dir():
            continue
        try:
            record = open_study(folder / "study").record
        except Exception:  # the journal is being created
            continue
        if first_hit(record, target, sign) is not None:
            subprocess.run(
                [sys.executable, "-m", "hpctune.cli", "stop", str(folder / "study")],
                cwd=folder,
                capture_output=True,
                check=False,
            )
            stopped = True
    output = proc.stdout.read() if proc.stdout else ""
    if proc.returncode != 0 and not stopped:
        raise SystemExit(f"study in {folder} failed:\n{output}")
    record = open_study(folder / "study").record
    start = float(record.started_time)
    end = float(
        record.ended_time or max(t for tr in record.trials.values() for t in tr.curve_times)
    )
    hit = first_hit(record, target, sign)
    values = [v for tr in record.trials.values() for v in tr.curve_values if math.isfinite(v)]
    return {
        "time_to_target": None if hit is None else hit - start,
        "worker_s_to_target": None if hit is None else worker_seconds(record, start, hit),
        "study_seconds": end - start,
        "study_worker_s": worker_seconds(record, start, end),
        "trials_started": len(record.trials),
        "trials_by_target": len(
            [t for t in record.trials.values() if hit is not None and t.created_time <= hit]
        ),
        "reports": sum(len(tr.curve_values) for tr in record.trials.values()),
        "best": sign * max(sign * v for v in values) if values else None,
        "stopped_at_target": stopped,
        "launch_seconds": time.monotonic() - t0,
    }


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _f(x: float | None, digits: int = 3) -> str:
    return "never" if x is None else f"{x:.{digits}g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--job", choices=JOBS, default="charlm")
    parser.add_argument("--policies", nargs="+", default=["hybrid", "asha"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--num-trials", type=int, default=32)
    parser.add_argument("--max-steps", type=int, default=60)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--target", type=float, default=None, help="default: the trace's")
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temporary one")
    parser.add_argument("--json", action="store_true", help="print only one JSON object")
    parser.add_argument("--quick", action="store_true", help="4 trials x 3 steps, asha, seed 0")
    args = parser.parse_args()
    if args.quick:
        args.policies, args.seeds, args.num_trials, args.max_steps = ["asha"], [0], 4, 3
    from hpctune.simulator.traces import Trace

    trace = Trace.load(REPO / "benchmarks" / "traces" / f"{args.job}.h5")
    sign = trace.sign
    if args.target is None:
        args.target = 3.0 if args.quick else trace.default_target()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="real-policies-"))
    job = REPO / "jobs" / args.job
    runs = []
    for seed in args.seeds:
        for policy in args.policies:
            folder = workdir / f"{policy}-seed{seed}"
            write_study(job, folder, policy, seed, args.num_trials, args.max_steps, args.slots)
            run = {"policy": policy, "seed": seed, **run_study(folder, args.target, sign)}
            runs.append(run)
            if not args.json:
                print(
                    f"{policy:8} seed {seed}: to target {_f(run['time_to_target'])} s, "
                    f"{_f(run['worker_s_to_target'])} worker-s, {run['trials_by_target']} trials "
                    f"(study {run['study_seconds']:.0f} s, best {_f(run['best'], 4)})",
                    flush=True,
                )
    summary = {}
    for policy in args.policies:
        mine = [r for r in runs if r["policy"] == policy]
        times = [math.inf if r["time_to_target"] is None else r["time_to_target"] for r in mine]
        work = [
            math.inf if r["worker_s_to_target"] is None else r["worker_s_to_target"] for r in mine
        ]
        summary[policy] = {
            "median_time_to_target": _finite(sorted(times)[len(times) // 2]),
            "median_worker_s_to_target": _finite(sorted(work)[len(work) // 2]),
            "reached": sum(math.isfinite(t) for t in times),
            "runs": len(mine),
        }
    out = {
        "job": args.job,
        "target": args.target,
        "num_trials": args.num_trials,
        "max_steps": args.max_steps,
        "slots": args.slots,
        "runs": runs,
        "summary": summary,
    }
    if args.json:
        print(json.dumps(out))
        return
    print(
        f"\n{args.job}: target {args.target:.4g}, {args.num_trials} trials x "
        f"{args.max_steps} steps, {args.slots} slots"
    )
    print("| policy | " + " | ".join(f"seed {s}" for s in args.seeds) + " | median |")
    print("|---|" + "---|" * (len(args.seeds) + 1))
    for policy, s in summary.items():
        cells = [
            f"{_f(r['time_to_target'])} s / {_f(r['worker_s_to_target'])} w-s"
            for r in runs
            if r["policy"] == policy
        ]
        print(
            f"| {policy} | " + " | ".join(cells) + f" | {_f(s['median_time_to_target'])} s / "
            f"{_f(s['median_worker_s_to_target'])} w-s ({s['reached']}/{s['runs']}) |"
        )


if __name__ == "__main__":
    main()
