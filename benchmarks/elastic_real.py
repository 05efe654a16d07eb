"""A real study with a deadline on the local Slurm cluster: planned against measured (issue 18).

The workload is a small real PyTorch model (the wide MLP of ``jobs/digits-elastic`` on
scikit-learn's digits, fixed global batch; one step is ``--passes`` epochs) whose time per step
depends on the CPUs a trial is given: ``torch.set_num_threads(ctx.devices)``, and each worker
gets one CPU per fake GPU (``gpus_per_worker = 1``, ``cpus_per_worker = 1``), so a size-2 short
study of the profile trains with two threads. The fake GPUs are the billed resource
(GPU-hours held, the plan's cost). For each repetition, in a fresh directory:

1. ``hpctune profile study.toml --sizes 1,2 --steps S --together 2,4``: the short studies run as
   Slurm jobs (steady step time per size, segment start, gap between segments, warm-up, INIT
   alone and with 2 and 4 workers starting at once, crowding with 2 and 4 training at once);
2. the deadline: ``--tightness`` times the fastest plan any static pool of at most ``slots``
   workers is predicted to reach (the tight deadline of RubberBand §6.3.1: the static plan
   needs its largest pool to meet it), or ``--deadline``;
3. ``hpctune launch study.toml --deadline D`` with ``HPCTUNE_REPLAN_DRIFT=inf`` (the first plan
   is followed to the end: its prediction is what is measured; ``--replan``: the controller
   re-plans late rungs, and the last plan's prediction is printed too), waiting for the end;
4. from the journal: the first plan's predicted completion time and cost against the measured
   ones (the study's start to its end; device-hours held by its worker jobs, from their start
   to their end, as ``hpctune status`` reports them), per stage the predicted and measured end,
   and the best static plan's predicted cost against the plan's measured cost;
5. a what-if, simulated only: the plan and the best static plan at the same deadline were the
   workers not to share the node's CPUs (the profile without its crowding and its start-up
   together), as on a cluster of real GPUs.

    tests/slurm/cluster.sh up; eval "$(tests/slurm/cluster.sh env)"
    PYTHONPATH=. python benchmarks/elastic_real.py --reps 3 [--json] \
        [--out benchmarks/results/elastic-real.json]

Study: SHA with eta 2 over 8 trials to steps 1, 2, 4, 8 (stages of 8, 4, 2 and 1 trials), at
most 4 one-GPU workers at once (the node's 4 fake GPUs). A repetition takes 2-3 minutes on the
project's 2-core machine. Wall-clock figures depend on the machine's load (another process on
the same cores slows every step): the script records the load average and one CPU's speed
(:func:`machine_speed`) before the profile, before the run and after it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent

TRAIN = '''
"""The wide MLP of jobs/digits-elastic; one step is PASSES epochs over the training set."""

import torch
from sklearn.datasets import load_digits
from torch import nn

GLOBAL_BATCH = 256
HIDDEN = 1024
PASSES = {passes}


def load_data():
    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    split = int(0.8 * len(y))
    return x[order[:split]], y[order[:split]], x[order[split:]], y[order[split:]]


def train(ctx):
    torch.set_num_threads(ctx.devices)  # one CPU per device this trial holds
    p = ctx.params
    x_train, y_train, x_val, y_val = load_data()
    torch.manual_seed(ctx.seed)
    model = nn.Sequential(
        nn.Linear(64, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
        nn.Linear(HIDDEN, 10),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=p["lr"], momentum=0.9)
    state = ctx.load_checkpoint()
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    loss_fn = nn.CrossEntropyLoss()
    for step in range(ctx.start_step, ctx.until_step):
        generator = torch.Generator().manual_seed(ctx.step_seed(step))
        for _ in range(PASSES):
            order = torch.randperm(len(y_train), generator=generator)
            for start in range(0, len(order), GLOBAL_BATCH):
                batch = order[start : start + GLOBAL_BATCH]
                optimizer.zero_grad()
                loss_fn(model(x_train[batch]), y_train[batch]).backward()
                optimizer.step()
        with torch.no_grad():
            accuracy = float((model(x_val).argmax(1) == y_val).float().mean())
        result = ctx.report(step=step + 1, val_accuracy=accuracy, devices=ctx.devices)
        ctx.save_checkpoint({{"model": model.state_dict(), "optimizer": optimizer.state_dict()}})
        if result.should_stop:
            return
'''

STUDY = """
[study]
name = "elastic-real-{rep}"
directory = "study"
entry_point = "train.py:train"
metric = "val_accuracy"
mode = "max"
max_steps = 8
num_trials = 8
seed = {rep}

[search_space]
lr = {{ type = "float", low = 1e-3, high = 0.3, log = true }}

[policy]
name = "sha"
reduction_factor = 2
bracket_size = 8

[resources]
slots = 4
gpus_per_worker = 1
cpus_per_worker = 1
max_devices = {max_devices}

[slurm]
partition = "debug"
time = 15
mem = "1G"
"""

FINAL = ("finished", "stopped", "failed")


def hpctune(*args: str, env: dict[str, str], timeout: float = 900) -> str:
    """Run the CLI of this checkout; its stdout (raises with its output on failure)."""
    result = subprocess.run(
        [sys.executable, "-m", "hpctune.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    if result.returncode != 0:
        raise SystemExit(
            f"hpctune {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n"
            f"{result.stderr}"
        )
    return result.stdout


def environment(replan: bool = False) -> dict[str, str]:
    """This checkout first on PYTHONPATH (for the Slurm jobs too: sbatch exports it); without
    ``replan`` the first plan is followed to the end (``HPCTUNE_REPLAN_DRIFT=inf``)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    if not replan:
        env["HPCTUNE_REPLAN_DRIFT"] = "inf"
    return env


def machine_speed(seconds: float = 1.0) -> float:
    """One CPU's speed now: 512x512 matrix products per second on one torch thread (another
    process on the same cores lowers it; compare the figures before the profile and the run)."""
    import torch

    torch.set_num_threads(1)
    a = torch.randn(512, 512, generator=torch.Generator().manual_seed(0))
    done, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        a = torch.tanh(a @ a)
        done += 1
    return done / (time.perf_counter() - began)


def fastest_static(spec: Any, profile: Any) -> float:
    """The predicted time of the fastest static pool of at most ``slots`` GPUs, trials of up
    to ``[resources] max_devices`` GPUs (no more than the profile measured)."""
    from hpctune.elastic import CostModel, experiment_from_study, simulate
    from hpctune.elastic.allocation import device_sizes, static_allocation, static_pools

    experiment = experiment_from_study(spec)
    sizes = device_sizes(min(spec.resources.max_devices, profile.max_devices))
    pools = static_pools(experiment, sizes, spec.resources.slots)
    return min(
        simulate(
            experiment, static_allocation(experiment, p, sizes), profile, CostModel()
        ).time.mean
        for p in pools
    )


def unshared_saving(spec: Any, profile: Any, deadline: float) -> dict[str, Any]:
    """What-if: the plan and the best static plan were the workers not to share the node's
    CPUs (crowding 1, start-up and warm-up as one worker alone), as on a cluster of real GPUs."""
    import dataclasses

    from hpctune.elastic.follow import plan_study

    alone = dataclasses.replace(
        profile, crowding={}, startup_together={}, warmup_together={}, source="unshared"
    )
    result = plan_study(spec, profile=alone)
    return {
        "plan_workers": [s.workers for s in result.plan.allocation.shapes],
        "plan_devices": [s.devices for s in result.plan.allocation.shapes],
        "static_pool": result.static.allocation.static_pool,
        "predicted_time_s": result.plan.prediction.time.mean,
        "predicted_gpu_hours": result.plan.prediction.cost.mean,
        "static_predicted_gpu_hours": result.static.prediction.cost.mean,
        "saving_predicted": result.saving,
    }


def steps_in_run(study: Any) -> dict[str, float | None]:
    """Median seconds between two reports of one segment, per stage end step (a segment's first
    step, which pays its start, is left out): the steady step as the run had it."""
    out: dict[str, list[float]] = {}
    for seg in study.record.segments.values():
        curve = study.curve(seg.trial_id)
        times = [
            t
            for step, t in zip(curve.steps.tolist(), curve.times.tolist(), strict=True)
            if seg.start_step < step <= seg.until_step
        ]
        out.setdefault(str(seg.until_step), []).extend(np.diff(times).tolist())
    return {k: float(np.median(v)) if v else None for k, v in sorted(out.items())}


def wait_until_ended(study_dir: Path, timeout: float) -> None:
    """Until the study is final and its controller journaled every worker's end."""
    from hpctune.api import open_study

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            record = open_study(study_dir).record
        except Exception:  # not created yet
            record = None
        if record is not None and record.state.value in FINAL:
            live = [w for w in record.workers.values() if w.state in ("started", "stopping")]
            if not live:
                return
        time.sleep(1.0)
    raise SystemExit(f"{study_dir}: the study did not end in {timeout:.0f} s")


def profile_summary(profile: Any) -> dict[str, Any]:
    """The profile's figures that the plan depends on."""
    together = max(profile.startup_together, default=1)
    return {
        "step_s": {str(g): profile.step_mean(g) for g in profile.sizes},
        "speedup_2": profile.speedup(2) if 2 in profile.sizes else None,
        "segment_start_s": float(np.mean(profile.segment_start)),
        "segment_gap_s": float(np.mean(profile.segment_gap)),
        "warmup_s": float(np.mean(profile.warmup)),
        "init_alone_s": float(np.mean(profile.startup)),
        "together": together,
        "init_together_s": float(np.mean(profile.startup_at(together))),
        "warmup_together_s": float(np.mean(profile.warmup_at(together))),
        "crowding_together": profile.crowding_at(together),
        "queue_wait_s": float(np.mean([v for s in profile.queue_wait.values() for v in s])),
    }


def one_run(rep: int, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Profile, plan and run repetition ``rep``; what was predicted and measured."""
    from hpctune.api import open_study
    from hpctune.elastic import Profile
    from hpctune.elastic.status import study_plan_status
    from hpctune.spec import load_spec

    folder = root / f"rep-{rep}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "train.py").write_text(textwrap.dedent(TRAIN.format(passes=args.passes)))
    toml = folder / "study.toml"
    toml.write_text(STUDY.format(rep=rep, max_devices=args.max_devices))
    env = environment(args.replan)
    load = os.getloadavg()[0]
    speed_profile = machine_speed()
    began = time.time()
    hpctune(
        "profile",
        str(toml),
        "--sizes",
        "1,2",
        "--steps",
        str(args.steps),
        "--together",
        "2,4",
        env=env,
    )
    profiled = time.time() - began
    profile = Profile.load(folder / "study")
    spec = load_spec(toml)
    fastest = fastest_static(spec, profile)
    deadline = args.deadline or round(args.tightness * fastest, 1)
    from hpctune.spec import with_deadline

    what_if = unshared_saving(with_deadline(spec, f"{deadline}s"), profile, deadline)
    load_run = os.getloadavg()[0]
    speed_run = machine_speed()
    launched = hpctune("launch", str(toml), "--deadline", f"{deadline}s", env=env)
    wait_until_ended(folder / "study", args.timeout)
    speed_after = machine_speed()
    study = open_study(folder / "study")
    record = study.record
    first = record.elastic_plans[0]
    plan = first["plan"]
    status = study_plan_status(record)
    assert status is not None
    predicted_time = plan["plan"]["prediction"]["time_s"]["mean"]
    predicted_cost = plan["plan"]["prediction"]["cost"]["mean"]
    static_cost = plan["static"]["prediction"]["cost"]["mean"]
    measured_time, measured_cost = status.elapsed, status.spent
    ends = [float(e) for e in first["stage_ends"]]
    return {
        "rep": rep,
        "directory": str(folder),
        "state": record.state.value,
        "load_before_profile": load,
        "load_before_run": load_run,
        "speed_before_profile": speed_profile,
        "speed_before_run": speed_run,
        "speed_after_run": speed_after,
        "profile_s": profiled,
        "profile": profile_summary(profile),
        "fastest_static_s": fastest,
        "deadline_s": deadline,
        "plan_kind": plan["plan"]["kind"],
        "plan_workers": [w for _, w in plan["plan"]["allocation"]["shapes"]],
        "plan_devices": [d for d, _ in plan["plan"]["allocation"]["shapes"]],
        "static_pool": plan["static"]["allocation"]["static_pool"],
        "static_workers": [w for _, w in plan["static"]["allocation"]["shapes"]],
        "predicted_time_s": predicted_time,
        "measured_time_s": measured_time,
        "time_error": measured_time / predicted_time - 1.0,
        "predicted_gpu_hours": predicted_cost,
        "measured_gpu_hours": measured_cost,
        "cost_error": measured_cost / predicted_cost - 1.0,
        "static_predicted_time_s": plan["static"]["prediction"]["time_s"]["mean"],
        "static_predicted_gpu_hours": static_cost,
        "saving_predicted": static_cost / predicted_cost,
        "saving_measured": static_cost / measured_cost,
        "met_deadline": measured_time <= deadline,
        "stage_ends_predicted_s": ends,
        "stage_ends_measured_s": [s.measured_end for s in status.stages],
        "steps_in_run_s": steps_in_run(study),
        "workers": len(record.workers),
        "plans": len(record.elastic_plans),
        "last_plan_predicted_time_s": status.predicted_time,
        "last_plan_predicted_gpu_hours": status.predicted_cost,
        "replan": args.replan,
        "launch_output": launched.strip().splitlines()[:2],
        "what_if_unshared": what_if,
    }


def _shapes(run: dict[str, Any]) -> str:
    """The plan's workers per stage, with their GPUs (``2x1``: two workers of one) when any
    worker holds more than one."""
    devices = run.get("plan_devices") or [1] * len(run["plan_workers"])
    if max(devices) == 1:
        return str(run["plan_workers"])
    return ", ".join(f"{w}x{d}" for w, d in zip(run["plan_workers"], devices, strict=True))


def report(runs: list[dict[str, Any]]) -> str:
    """The runs as text."""
    lines = [
        "rep  deadline  plan workers  static  predicted       measured        error "
        "time/cost  static predicted  saving pred/meas  met",
    ]
    for r in runs:
        lines.append(
            f"{r['rep']:>3}  {r['deadline_s']:>6.1f}s  {_shapes(r)!s:<12}  "
            f"{r['static_pool']:>6}  {r['predicted_time_s']:5.1f}s {r['predicted_gpu_hours']:.5f}"
            f"  {r['measured_time_s']:5.1f}s {r['measured_gpu_hours']:.5f}  "
            f"{100 * r['time_error']:+5.0f}% {100 * r['cost_error']:+5.0f}%  "
            f"{r['static_predicted_time_s']:5.1f}s {r['static_predicted_gpu_hours']:.5f}  "
            f"{r['saving_predicted']:.2f}x {r['saving_measured']:.2f}x  "
            f"{'yes' if r['met_deadline'] else 'NO'}"
        )
    for r in runs:
        p = r["profile"]
        lines.append(
            f"rep {r['rep']} profile: step {p['step_s']} s (speed-up at 2 CPUs "
            f"{p['speedup_2']:.2f}), INIT {p['init_alone_s']:.2f} s alone, "
            f"{p['init_together_s']:.2f} s with {p['together']} at once, warm-up "
            f"{p['warmup_s']:.2f}/{p['warmup_together_s']:.2f} s, gap {p['segment_gap_s']:.2f} s, "
            f"crowding {p['crowding_together']:.2f}x; stage ends predicted "
            f"{[round(e, 1) for e in r['stage_ends_predicted_s']]}, measured "
            f"{[None if e is None else round(e, 1) for e in r['stage_ends_measured_s']]}; "
            f"steady steps in the run by stage end {r['steps_in_run_s']}; "
            f"load {r['load_before_run']:.2f}; CPU speed (products/s) before the profile "
            f"{r['speed_before_profile']:.0f}, before the run {r['speed_before_run']:.0f}, "
            f"after it {r['speed_after_run']:.0f}; unshared what-if: plan "
            f"{r['what_if_unshared']['plan_workers']} against a static pool of "
            f"{r['what_if_unshared']['static_pool']}, "
            f"{r['what_if_unshared']['saving_predicted']:.2f}x predicted"
            + (
                f"; {r['plans']} plans, the last predicted {r['last_plan_predicted_time_s']:.1f} s"
                f" and {r['last_plan_predicted_gpu_hours']:.5f}"
                if r.get("replan")
                else ""
            )
        )
    within = sum(abs(r["time_error"]) <= 0.15 and abs(r["cost_error"]) <= 0.15 for r in runs)
    savings = ", ".join(f"{r['saving_measured']:.2f}x" for r in runs)
    lines.append(
        f"within 15 % in time and cost: {within} of {len(runs)}; measured saving over the best "
        f"static plan's predicted cost: {savings}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4, help="steps per short study")
    parser.add_argument("--passes", type=int, default=3, help="epochs per step")
    parser.add_argument("--tightness", type=float, default=1.1)
    parser.add_argument(
        "--max-devices", type=int, default=1, help="[resources] max_devices: GPUs per trial"
    )
    parser.add_argument("--deadline", type=float, default=None, help="seconds (else tightness)")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument(
        "--replan",
        action="store_true",
        help="let the controller re-plan a late rung (default: the first plan to the end)",
    )
    parser.add_argument("--root", type=Path, default=Path("/tmp/hpctune-elastic-real"))
    parser.add_argument("--json", action="store_true", help="print the runs as JSON")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    if shutil.which("sbatch") is None:
        raise SystemExit("no sbatch: start the cluster (tests/slurm/cluster.sh up) and its env")
    runs = []
    for rep in range(args.reps):
        runs.append(one_run(rep, args.root, args))
        if not args.json:
            print(report(runs[-1:]).splitlines()[1], flush=True)
    data = {
        "command": "python benchmarks/elastic_real.py " + " ".join(argv or sys.argv[1:]),
        "runs": runs,
    }
    if args.out is not None:
        args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps(data, indent=1) if args.json else report(runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
