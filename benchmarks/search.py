"""Model-based generators against random search in the simulator, on every trace.

For each trace of ``benchmarks/traces/``, S = 8 slots and K configuration orders (seeds, default
25): the median time to target and the median best value at a fixed budget for the generators
random, tpe, gp and cmaes, each under the policies default, asha and hyperband (their default
options). A model-based generator's proposals are answered with the nearest configuration of the
trace not used yet (``hpctune/simulator/nearest.py``); random search takes the seeded configuration
order.

    nice -n 10 python benchmarks/search.py [--seeds 25] [--jobs 2] [--results search.jsonl]
        [--generators random,tpe,gp,cmaes] [--policies default,asha,hyperband] [--only digits]
    nice -n 10 python benchmarks/search.py --rebuild-cost   # seconds per proposal by trials

Protocol (the one of ``../shared/tools/peers/simulate_peers.py``, so the peers' figures compare):
no queue wait, start-up or checkpoint costs; the target is the 97th percentile of the
configurations' final values in the metric's direction (the trace's ``target`` attribute if it
has one); time to target is the first simulated time a trial reports a value at least as good;
the budget is a quarter of the time running every configuration to its end takes on S slots
(``sum(epoch_seconds) / S / 4``), and the best value at the budget is the best value reported by
then. Every run's figures are appended to ``--results`` (JSON lines) as it ends, and runs found
there are not run again, so an interrupted benchmark continues where it stopped; runs go seed by
seed (every cell's seed 0, then every cell's seed 1, ...), so a run stopped early leaves every cell
with its first seeds rather than some cells complete and others empty.

The model-based peers (Optuna's TPE with its Hyperband pruner, Syne Tune's BOHB and MOBSTER,
Ray Tune's BOHB) run with ``benchmarks/search_peers.py`` in a separate virtual environment (its
docstring says how); ``--peers FILE`` adds its results to the table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from hpctune.simulator.traces import Trace

REPO = Path(__file__).resolve().parent.parent
TRACES = REPO / "benchmarks/traces"
GENERATORS = ("random", "tpe", "gp", "cmaes")
POLICIES = ("default", "asha", "hyperband")
SLOTS = 8


def peers_target(trace: Trace) -> float:
    """The peers harness's target: the 97th percentile of final values (metric direction)."""
    final = trace.curves[:, -1]
    q = 0.97 if trace.mode == "max" else 0.03
    return float(np.nanquantile(final, q))


def budget_seconds(trace: Trace, slots: int = SLOTS) -> float:
    """A quarter of the time every configuration run to its end takes on ``slots`` slots."""
    return float(np.nansum(trace.epoch_seconds)) / slots / 4.0


def parse_generator(text: str) -> tuple[str, dict[str, Any]]:
    """``"tpe"`` or ``"tpe:multivariate=true,n_startup_trials=5"`` -> name and options."""
    name, _, rest = text.partition(":")
    options: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        options[key] = json.loads(value)
    return name, options


def run_one(job: tuple[str, str, str, int, int]) -> dict[str, Any]:
    """One simulated study: (trace path, generator, policy, seed, slots) -> its figures."""
    import torch

    from hpctune.simulator import simulate

    torch.set_num_threads(1)  # GP fits: one thread per process (the pool has --jobs)
    path, generator, policy, seed, slots = job
    name, options = parse_generator(generator)
    trace = Trace.load(path)
    target = peers_target(trace)
    budget = budget_seconds(trace, slots)
    t0 = time.perf_counter()
    result = simulate(
        trace,
        policy,
        slots=slots,
        seed=seed,
        generator=None if name == "random" else name,
        generator_options=options,
        target=target,
        stop_at_target=True,
        min_time=budget,
    )
    best = result.best_value_at(budget)
    return {
        "trace": Path(path).stem,
        "generator": generator,
        "policy": policy,
        "seed": seed,
        "slots": slots,
        "target": target,
        "budget": budget,
        "time_to_target": result.time_to_target,
        "best_at_budget": None if math.isnan(best) else best,
        "trials_started": result.trials_started,
        "wall_s": time.perf_counter() - t0,
    }


def load_results(path: Path) -> list[dict[str, Any]]:
    """The results appended so far (a torn last line is skipped)."""
    out = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["trace"], r["generator"], r["policy"], r["seed"], r["slots"])


def run_all(jobs: list[tuple[str, str, str, int, int]], results: Path, workers: int) -> None:
    """Run the jobs not in ``results`` yet, appending each result as it ends."""
    done = {_key(r) for r in load_results(results)}
    todo = [j for j in jobs if (Path(j[0]).stem, *j[1:]) not in done]
    print(f"{len(jobs) - len(todo)} runs already in {results}; {len(todo)} to run", flush=True)
    if not todo:
        return
    t0 = time.time()

    def record(items: Iterable[dict[str, Any]]) -> None:
        with results.open("a") as f:
            for i, r in enumerate(items, 1):
                f.write(json.dumps(r) + "\n")
                f.flush()
                if i % 10 == 0 or i == len(todo):
                    print(f"  {i}/{len(todo)} runs, {time.time() - t0:.0f} s", flush=True)

    if workers > 1:
        import multiprocessing as mp

        # the costliest (gp) first, so the pool ends together
        todo.sort(key=lambda j: (j[1] != "gp", j[1] == "random"))
        with mp.get_context("fork").Pool(workers) as pool:
            record(pool.imap_unordered(run_one, todo, chunksize=1))
    else:
        record(run_one(j) for j in todo)


def _median(values: list[float]) -> float:
    return float(np.median(values)) if values else math.nan


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median time to target (inf if more than half never reach it), reached count, median
    best value at the budget, median wall seconds per run."""
    ttt = [math.inf if r["time_to_target"] is None else r["time_to_target"] for r in rows]
    best = [r["best_at_budget"] for r in rows if r["best_at_budget"] is not None]
    return {
        "time_to_target": _median(ttt),
        "reached": sum(math.isfinite(t) for t in ttt),
        "runs": len(rows),
        "best_at_budget": _median(best),
        "wall_s": _median([r["wall_s"] for r in rows]),
    }


def _f(x: float, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if math.isinf(x):
        return "not reached"
    return f"{x:.{digits}g}"


def table(results: list[dict[str, Any]], peers: list[dict[str, Any]]) -> str:
    """The Markdown tables: per trace, generators x policies; the ratios random/TPE under ASHA;
    the peers beside."""
    lines: list[str] = []
    traces = sorted({r["trace"] for r in results} | {p["trace"] for p in peers})
    ratios = []
    for name in traces:
        rows = [r for r in results if r["trace"] == name]
        prow = [p for p in peers if p["trace"] == name]
        first = (rows or prow)[0]
        lines.append(
            f"\n**{name}** (target {first['target']:.4g}, budget {first['budget']:.3g} s, "
            f"S = {first['slots']}, {len({r['seed'] for r in rows + prow})} seeds): median time "
            "to target in s (reached/runs) / median best value at the budget\n"
        )
        policies = [p for p in POLICIES if any(r["policy"] == p for r in rows)]
        lines.append("| generator | " + " | ".join(policies) + " |")
        lines.append("|---|" + "---|" * len(policies))
        names = list(GENERATORS) + sorted({r["generator"] for r in rows} - set(GENERATORS))
        for gen in names:
            cells = []
            for pol in policies:
                sel = [r for r in rows if r["generator"] == gen and r["policy"] == pol]
                if not sel:
                    cells.append("")
                    continue
                s = summarize(sel)
                cells.append(
                    f"{_f(s['time_to_target'])} ({s['reached']}/{s['runs']}) / "
                    f"{_f(s['best_at_budget'], 4)}"
                )
            if any(cells):
                lines.append(f"| {gen} | " + " | ".join(cells) + " |")
        for peer in sorted({p["peer"] for p in prow}):
            s = summarize([p for p in prow if p["peer"] == peer])
            cell = (
                f"{_f(s['time_to_target'])} ({s['reached']}/{s['runs']}) / "
                f"{_f(s['best_at_budget'], 4)}"
            )
            column = "hyperband" if "hyperband" in peer else "asha"  # its own stopping rule
            cells = [cell if pol == column else "" for pol in policies]
            lines.append(f"| peer: {peer} | " + " | ".join(cells) + " |")
        rand = [r for r in rows if r["generator"] == "random" and r["policy"] == "asha"]
        tpe = [r for r in rows if r["generator"] == "tpe" and r["policy"] == "asha"]
        if rand and tpe:
            ratio = summarize(rand)["time_to_target"] / summarize(tpe)["time_to_target"]
            ratios.append((name, ratio))
    if ratios:
        lines.append("\nrandom + ASHA / TPE + ASHA, median time to target (goal >= 1.3):")
        for name, ratio in ratios:
            lines.append(f"- {name}: {ratio:.2f}x")
    return "\n".join(lines) + "\n"


def rebuild_cost(sizes: tuple[int, ...] = (50, 100, 200, 400), repeat: int = 3) -> None:
    """Print the seconds one proposal takes with ``n`` finished trials in the view (the digits
    space), for a fresh generator (no cache: what a restarted controller pays once) and a warm
    one (the per-trial Optuna records cached, as in a running controller)."""
    from hpctune.policies import StudyView, TrialView
    from hpctune.policies.generators import make_generator
    from hpctune.spec import load_spec
    from hpctune.study.states import TrialStatus

    space = load_spec(REPO / "jobs/digits/study.toml").space
    rng = np.random.default_rng(0)
    steps = np.arange(1, 21)
    print("proposal seconds (median of 3) by finished trials in the view: fresh / warm")
    for name in ("tpe", "cmaes", "gp", "qmc", "nsga2"):
        cells = []
        for n in sizes:
            if name == "gp" and n > 100:
                cells.append("-")
                continue
            trials = {
                i: TrialView(
                    i,
                    TrialStatus.COMPLETED,
                    space.sample(rng),
                    step=20,
                    steps=steps,
                    values=rng.uniform(0.5, 1.0, 20),
                )
                for i in range(n)
            }
            view = StudyView("acc", "max", 20, 1, 0.0, trials, 1, 8, None)
            fresh, warm = [], []
            for k in range(repeat):
                gen = make_generator(name, {}, space, k)
                t0 = time.perf_counter()
                gen.propose(n, view)
                fresh.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                gen.propose(n + 1, view)
                warm.append(time.perf_counter() - t0)
            cells.append(f"{np.median(fresh):.3f} / {np.median(warm):.3f}")
        row = "  ".join(f"n={n}: {c}" for n, c in zip(sizes, cells, strict=True))
        print(f"  {name:6s} {row}")


def main(argv: list[str] | None = None) -> int:
    """Run what is missing, print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", type=Path, default=TRACES)
    parser.add_argument("--only", default=None, help="comma list of trace names")
    parser.add_argument("--seeds", type=int, default=25)
    parser.add_argument("--slots", type=int, default=SLOTS)
    parser.add_argument("--generators", default=",".join(GENERATORS))
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--results", type=Path, default=Path("search.jsonl"))
    parser.add_argument("--peers", type=Path, default=None, help="search_peers.py results")
    parser.add_argument("--table-only", action="store_true", help="run nothing, print")
    parser.add_argument(
        "--rebuild-cost", action="store_true", help="time one proposal by trials in the view"
    )
    args = parser.parse_args(argv)
    if args.rebuild_cost:
        rebuild_cost()
        return 0
    paths = sorted(args.traces.glob("*.h5"))
    if args.only:
        keep = set(args.only.split(","))
        paths = [p for p in paths if p.stem in keep]
    jobs = [
        (str(p), g, pol, seed, args.slots)
        for seed in range(args.seeds)  # seed-major: a partial run has every cell's first seeds
        for p in paths
        for g in args.generators.split(",")
        for pol in args.policies.split(",")
    ]
    if not args.table_only:
        run_all(jobs, args.results, args.jobs)
    wanted = {(Path(j[0]).stem, *j[1:]) for j in jobs}
    results = [r for r in load_results(args.results) if _key(r) in wanted]
    peers = load_results(args.peers) if args.peers else []
    print(table(results, peers))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
