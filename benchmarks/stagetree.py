"""Stage trees on simulated studies: sharing (merge rate) and scheduling (TreeML Figure 6.4).

For each search space (grid search over hyperparameter sequences) the search plan of all its
trials is built, and its stage tree is run on W simulated workers under Hippo's critical-path
scheduler (whole paths to one worker, one checkpoint load per path), the same unbatched (a load
per stage, the thesis's fair comparison in §6.3), breadth-first order (BFS) and
most-children-first (THR). Reported: trials, total vs unique steps and the merge rate p; per W
the makespans and their ratios to critical path, and the GPU-time (worker-seconds) of the
stage-based run against the trial-based run (every trial alone, FIFO on the same W workers).

The time per step depends on the batch size (a larger batch trains an epoch faster), as the
thesis's cost estimator would predict from profiling: ``seconds = 10 * sqrt(128 / batch_size)``.
Every assignment pays ``--load`` seconds (checkpoint load and worker switch).

Then the same spaces under the SHA and ASHA policies (reduction factor 2, first rung at 15
steps; SHA in one bracket of every configuration), each a study run by the controller on the
simulator (``hpctune.simulator``, ``stages=True`` with each ``[stages] scheduler``): trials
arrive and are promoted while the study runs, and the stage tree is regenerated from the
journal at every decision; trial-based SHA and ASHA make their decisions without sharing
(``stages=False``). The metric is a seeded random draw per trained prefix (trials equal up to
a step have the same value there). Workers checkpoint every ``--checkpoint-every`` steps (the
study's boundary), so a trial promoted later can branch inside a stretch another trial already
trained without retraining it; every assignment pays ``--load`` seconds (a new worker's
start-up or an idle worker's switch).

    python benchmarks/stagetree.py [--workers 4 8 16] [--load 30] [--checkpoint-every 5]
        [--json] [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from hpctune.simulator import SimulationResult
from hpctune.simulator import simulate as simulate_study
from hpctune.simulator.traces import Trace
from hpctune.stagetree import Scheduler, build_stage_tree, simulate, trial_makespan
from hpctune.stagetree.pieces import ConfigPiece, trial_stages
from hpctune.stagetree.preview import plan_configs


def seconds_per_step(config: ConfigPiece) -> float:
    """The cost estimate: 10 s per epoch at batch size 128, sqrt-faster for larger batches."""
    pieces = dict(config)
    batch = pieces["batch_size"].value(0) if "batch_size" in pieces else 128
    return 10.0 * math.sqrt(128 / float(batch))


def warmup(steps: int, then: dict[str, Any]) -> dict[str, Any]:
    return {"schedule": "warmup", "warmup_steps": steps, "then": then}


def lr_bs_space(quick: bool) -> tuple[list[dict[str, Any]], int]:
    """TreeML Table 6.1's ResNet space: lr sequences x batch-size milestones, 120 epochs."""
    max_steps = 120
    lrs: list[dict[str, Any]] = []
    for base in (0.1, 0.05) if not quick else (0.1,):
        lrs += [
            {"schedule": "multistep", "base": base, "milestones": [60, 90], "gamma": 0.1},
            {"schedule": "multistep", "base": base, "milestones": [60, 100], "gamma": 0.1},
            {"schedule": "multistep", "base": base, "milestones": [90], "gamma": 0.1},
            warmup(5, {"schedule": "multistep", "base": base, "milestones": [55, 85]}),
            warmup(5, {"schedule": "exponential", "base": base, "gamma": 0.97}),
            warmup(5, {"schedule": "cosine", "base": base, "total_steps": 115}),
            {"schedule": "cyclic", "low": base / 10, "high": base, "period": 20},
        ]
    sizes: list[dict[str, Any]] = [{"schedule": "constant", "value": 128, "integer": True}]
    sizes += [
        {"schedule": "multistep", "base": 128, "milestones": m, "gamma": 2, "integer": True}
        for m in ([60], [90], [60, 90])
    ]
    configs = [{"lr": lr, "batch_size": bs} for lr, bs in itertools.product(lrs, sizes)]
    return configs, max_steps


def sequences_space(quick: bool) -> tuple[list[dict[str, Any]], int]:
    """The thesis's Figure 1.1 space: every lr sequence of 3 stages of 100 steps."""
    values = (0.1, 0.05, 0.02, 0.01) if not quick else (0.1, 0.01)
    configs = [
        {
            "lr": {"schedule": "piecewise", "values": list(seq), "milestones": [100, 200]},
            "batch_size": 128,
        }
        for seq in itertools.product(values, repeat=3)
    ]
    return configs, 300


SPACES = {"lr-batch-size": lr_bs_space, "lr-sequences": sequences_space}


def run_space(name: str, workers: list[int], load: float, quick: bool) -> dict[str, Any]:
    """All figures for one space."""
    configs, max_steps = SPACES[name](quick)
    plan = plan_configs(configs, max_steps)
    tree = build_stage_tree(plan)
    per_trial = [
        sum((st.end - st.start) * seconds_per_step(st.config) for st in trial_stages(c, max_steps))
        for c in configs
    ]
    out: dict[str, Any] = {
        "space": name,
        "trials": len(plan.trials),
        "max_steps": max_steps,
        "total_steps": plan.total_steps(),
        "unique_steps": plan.unique_steps(),
        "merge_rate": plan.merge_rate(),
        "stages": len(tree.stages),
        "trees": len(tree.roots),
        "load_seconds": load,
        "workers": {},
    }
    for w in workers:
        runs = {
            "critical-path": simulate(
                tree, Scheduler.CRITICAL_PATH, w, seconds_per_step, transition_seconds=load
            ),
            "critical-path-unbatched": simulate(
                tree,
                Scheduler.CRITICAL_PATH,
                w,
                seconds_per_step,
                transition_seconds=load,
                batch=False,
            ),
            "bfs": simulate(tree, Scheduler.BFS, w, seconds_per_step, transition_seconds=load),
            "most-children": simulate(
                tree, Scheduler.MOST_CHILDREN, w, seconds_per_step, transition_seconds=load
            ),
        }
        trial_busy = sum(per_trial) + load * len(per_trial)
        trial_span = trial_makespan([s + load for s in per_trial], w)
        best = runs["critical-path"]
        out["workers"][str(w)] = {
            "makespan_s": {k: r.makespan for k, r in runs.items()} | {"trial-based": trial_span},
            "ratio_to_critical_path": {k: r.makespan / best.makespan for k, r in runs.items()}
            | {"trial-based": trial_span / best.makespan},
            "gpu_seconds": {"trial-based": trial_busy, "stage-based": best.busy_seconds},
            "gpu_saving": trial_busy / best.busy_seconds,
            "loads": {k: r.loads for k, r in runs.items()},
        }
    return out


def space_trace(configs: list[dict[str, Any]], max_steps: int, seed: int) -> Trace:
    """The space as a trace for the simulator: each step takes :func:`seconds_per_step` of its
    batch size, and the metric is a seeded random draw per trained prefix (trials whose
    configurations agree up to a step have the same value there, as equal training gives)."""
    rng = np.random.default_rng(seed)
    scores: dict[tuple[Any, ...], float] = {}
    curves = np.zeros((len(configs), max_steps))
    seconds = np.zeros((len(configs), max_steps))
    for row, config in enumerate(configs):
        stages = trial_stages(config, max_steps)
        for stage in stages:
            seconds[row, stage.start : stage.end] = seconds_per_step(stage.config)
        for step in range(1, max_steps + 1):
            prefix = tuple((s.config, s.start, min(s.end, step)) for s in stages if s.start < step)
            if prefix not in scores:
                scores[prefix] = float(rng.random())
            curves[row, step - 1] = scores[prefix]
    space: dict[str, Any] = {}
    for name in configs[0]:
        values = [c[name] for c in configs]
        distinct = [v for i, v in enumerate(values) if v not in values[:i]]
        space[name] = distinct if len(distinct) > 1 else distinct[0]
    return Trace(
        curves,
        seconds,
        tuple(configs),
        metric="score",
        mode="max",
        random_level=0.0,
        source="benchmarks/stagetree.py",
        search_space=space,
    )


def run_tuner(
    policy: str,
    trace: Trace,
    scheduler: Scheduler,
    workers: int,
    load: float,
    *,
    shared: bool,
    every: int | None,
    seed: int,
    eta: int = 2,
    min_steps: int = 15,
) -> SimulationResult:
    """One study of the ``policy`` (``"sha"``, in one bracket of every configuration, or
    ``"asha"``) with rungs ``eta`` apart from ``min_steps``, run by the controller on the
    simulator: over a stage tree under ``scheduler`` (``shared``) or trial by trial. Every
    assignment pays ``load`` seconds; workers checkpoint every ``every`` steps and at stage
    ends."""
    options: dict[str, Any] = {"reduction_factor": eta, "grace_period": min_steps}
    if policy == "sha":
        options["bracket_size"] = trace.num_configs
    return simulate_study(
        trace,
        policy,
        options,
        slots=workers,
        seed=seed,
        startup=load,
        segment_start=load,
        boundary=every or trace.num_epochs,
        stages=shared,
        stage_scheduler=scheduler.value,
    )


def busy_seconds(result: SimulationResult, load: float) -> float:
    """Worker-seconds training or paying an assignment's load."""
    return result.training_hours * 3600 + load * len(result.segments)


def _tuner_figures(
    run: Callable[[Scheduler, bool, int], SimulationResult], seeds: int, workers: int, load: float
) -> dict[str, Any]:
    """Mean makespans, GPU time and worker utilisation (busy / (makespan x W)) over seeds:
    each scheduler, and trial-based."""
    span: dict[str, float] = {}
    gpu: dict[str, float] = {}
    use: dict[str, float] = {}
    for seed in range(seeds):
        for sched in Scheduler:
            result = run(sched, True, seed)
            busy = busy_seconds(result, load)
            span[sched.value] = span.get(sched.value, 0.0) + result.end_time / seeds
            gpu[sched.value] = gpu.get(sched.value, 0.0) + busy / seeds
            share = busy / (result.end_time * workers) / seeds
            use[sched.value] = use.get(sched.value, 0.0) + share
        alone = run(Scheduler.CRITICAL_PATH, False, seed)
        span["trial-based"] = span.get("trial-based", 0.0) + alone.end_time / seeds
        gpu["trial-based"] = gpu.get("trial-based", 0.0) + busy_seconds(alone, load) / seeds
    best = span["critical-path"]
    return {
        "makespan_s": span,
        "ratio_to_critical_path": {k: v / best for k, v in span.items()},
        "gpu_seconds": {"trial-based": gpu["trial-based"], "stage-based": gpu["critical-path"]},
        "gpu_saving": gpu["trial-based"] / gpu["critical-path"],
        "utilisation": use,
    }


def sha_figures(
    name: str, workers: list[int], load: float, quick: bool, every: int | None, seeds: int
) -> dict[str, Any]:
    """SHA and ASHA, stage-based under each scheduler and trial-based, on one space."""
    configs, max_steps = SPACES[name](quick)
    traces = [space_trace(configs, max_steps, seed) for seed in range(seeds)]
    out: dict[str, Any] = {
        "space": name,
        "trials": len(configs),
        "checkpoint_every": every,
        "seeds": seeds,
        "sha": {},
        "asha": {},
    }
    for w in workers:
        for policy in ("sha", "asha"):

            def run(
                sched: Scheduler, shared: bool, seed: int, w: int = w, policy: str = policy
            ) -> SimulationResult:
                return run_tuner(
                    policy, traces[seed], sched, w, load, shared=shared, every=every, seed=seed
                )

            out[policy][str(w)] = _tuner_figures(run, seeds, w, load)
    return out


def format_sha(r: dict[str, Any]) -> str:
    """A text block for SHA and ASHA on one space."""
    lines = [
        f"SHA and ASHA policies (eta 2, rungs from 15 steps) on {r['space']}, {r['trials']} "
        f"trials, mean of {r['seeds']} seeds; studies run by the controller on the simulator; "
        "checkpoints "
        + (f"every {r['checkpoint_every']} steps" if r["checkpoint_every"] else "at stage ends"),
        f"  {'':4} {'W':>3} {'critical':>10} {'bfs':>10} {'most-ch.':>10} {'trials':>10} | "
        f"{'bfs/cp':>6} {'thr/cp':>6} {'tr/cp':>6} | {'GPU saving':>10}",
    ]
    for label, block in (("SHA ", r["sha"]), ("ASHA", r["asha"])):
        for w, f in block.items():
            lines.append(f"  {label} {_sha_row(w, f)}")
    lines.append("  worker utilisation, busy / (makespan x W):")
    for label, block in (("SHA ", r["sha"]), ("ASHA", r["asha"])):
        for w, f in block.items():
            u = f["utilisation"]
            lines.append(
                f"  {label} {w:>3} {u['critical-path']:>10.3f} {u['bfs']:>10.3f} "
                f"{u['most-children']:>10.3f}"
            )
    return "\n".join(lines)


def _sha_row(w: str, f: dict[str, Any]) -> str:
    m, q = f["makespan_s"], f["ratio_to_critical_path"]
    return (
        f"{w:>3} {m['critical-path']:>10.0f} {m['bfs']:>10.0f} {m['most-children']:>10.0f} "
        f"{m['trial-based']:>10.0f} | {q['bfs']:>6.2f} {q['most-children']:>6.2f} "
        f"{q['trial-based']:>6.2f} | {f['gpu_saving']:>9.2f}x"
    )


def format_space(r: dict[str, Any]) -> str:
    """A text block for one space."""
    lines = [
        f"space {r['space']}: {r['trials']} trials x {r['max_steps']} steps; total "
        f"{r['total_steps']} steps, unique {r['unique_steps']}, merge rate p = "
        f"{r['merge_rate']:.2f}; {r['stages']} stages in {r['trees']} trees; load "
        f"{r['load_seconds']:g} s per assignment",
        f"  {'W':>3} {'critical':>10} {'unbatched':>10} {'bfs':>10} {'most-ch.':>10} "
        f"{'trials':>10} | {'bfs/cp':>6} {'thr/cp':>6} {'unb/cp':>6} {'tr/cp':>6} | "
        f"{'GPU saving':>10}",
    ]
    for w, f in r["workers"].items():
        m, q = f["makespan_s"], f["ratio_to_critical_path"]
        lines.append(
            f"  {w:>3} {m['critical-path']:>10.0f} {m['critical-path-unbatched']:>10.0f} "
            f"{m['bfs']:>10.0f} {m['most-children']:>10.0f} {m['trial-based']:>10.0f} | "
            f"{q['bfs']:>6.2f} {q['most-children']:>6.2f} {q['critical-path-unbatched']:>6.2f} "
            f"{q['trial-based']:>6.2f} | {f['gpu_saving']:>9.2f}x"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--load", type=float, default=30.0, help="seconds per assignment")
    parser.add_argument(
        "--checkpoint-every",
        type=int,
        default=5,
        help="SHA: workers also checkpoint every N steps inside stages (0: only at stage ends)",
    )
    parser.add_argument("--seeds", type=int, default=5, help="SHA/ASHA: scores and orders")
    parser.add_argument("--json", action="store_true", help="print only one JSON object")
    parser.add_argument("--quick", action="store_true", help="small spaces, W = 2 (CI smoke)")
    args = parser.parse_args()
    workers = [2] if args.quick else args.workers
    results = [run_space(name, workers, args.load, args.quick) for name in SPACES]
    every = args.checkpoint_every or None
    seeds = 2 if args.quick else args.seeds
    sha = [sha_figures(name, workers, args.load, args.quick, every, seeds) for name in SPACES]
    if args.json:
        print(json.dumps({"version": 1, "spaces": results, "sha": sha}))
        return
    for r in results:
        print(format_space(r))
    for r in sha:
        print(format_sha(r))


if __name__ == "__main__":
    main()
