"""Every hpctune policy against the peers, on every trace, under the peers harness's protocol.

For each trace of ``benchmarks/traces/``, S slots (default 4, 8, 16 and 25) and K configuration
orders (default 25): the median time to target and the median worker-seconds (GPU-seconds) to
target of every hpctune policy that stops configurations of a fixed set (default, bandit, sha,
asha, hyperband, median, pop, earlyterm, hybrid), once with the peers' orders (seed k's order is
``numpy.random.default_rng(k).permutation(n_configs)``, random search) and once with a
model-based generator (``--generators``, default TPE, the best of ``benchmarks/search.py``; its
proposals are answered with the nearest unused configuration of the trace, seed k; at S = 8 only
by default, ``--generator-slots``, and under default, asha and hybrid, ``--generator-policies``,
as its runs cost 2-5 times more). Beside them
the peers (Ray Tune, Syne Tune and Optuna schedulers) measured by the peers harness
(``../shared/tools/peers/simulate_peers.py``) on the same orders and target, read from the small
files ``benchmarks/results/peers-S<S>.json``, and the model-based peers (Optuna's TPE with its
Hyperband pruner, Syne Tune's BOHB, Ray Tune's BOHB: ``benchmarks/search_peers.py --target
default``, S = 8) from ``benchmarks/results/model-peers-S<S>.jsonl``; the limit (the fastest
single configuration from t = 0); and per trace the best hpctune policy and hybrid against the
best peer.

Protocol (the harness's): no queue wait, start-up or checkpoint costs; the target is the trace's
default (the value only the best 5 % of configurations reach, ``Trace.default_target``; the peers
get it as a ``target`` attribute on a copy of the trace, negated for ``mode = "min"``, since the
harness negates loss curves); time to target is the first simulated time a trial reports a value
at least as good; worker-seconds to target is the slot time held until then; a run that never
reaches the target counts as infinite in the medians. POP, EarlyTerm and Bandit judge every
``--boundary`` steps (5); POP is given the target, as its user would. Curve predictions use the
default (amortised) model.

The whole measurement::

    python benchmarks/policies.py --peer-traces /tmp/peer-traces
    for S in 4 8 16 25; do
        /tmp/peers/bin/python ../shared/tools/peers/simulate_peers.py --traces /tmp/peer-traces \\
            --S $S --seeds 25 --jobs 1 --out /tmp/peers-S$S.json
        python benchmarks/policies.py --import-peers /tmp/peers-S$S.json
    done
    PYTHONPATH=. /tmp/peers/bin/python benchmarks/search_peers.py --target default --seeds 25 \\
        --peers optuna_tpe_hyperband,syne_bohb,ray_bohb --jobs 1 --results /tmp/model-peers.jsonl
    python benchmarks/policies.py --import-model-peers /tmp/model-peers.jsonl
    nice -n 10 python benchmarks/policies.py [--slots 4 8 16 25] [--seeds 25] [--jobs 2]
        [--generators tpe] [--results /tmp/policies.jsonl] [--only digits] [--json]
    python benchmarks/policies.py --quick --json    # smoke run: digits, S = 8, 3 orders

Every run's figures are appended to ``--results`` (JSON lines) as it ends and runs found there are
not run again, so an interrupted measurement continues where it stopped.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hpctune.simulator.traces import Trace

REPO = Path(__file__).resolve().parent.parent
TRACES = REPO / "benchmarks" / "traces"
RESULTS = REPO / "benchmarks" / "results"
POLICIES = (
    "default",
    "bandit",
    "sha",
    "asha",
    "hyperband",
    "median",
    "pop",
    "earlyterm",
    "hybrid",
)
WITH_BOUNDARY = ("pop", "earlyterm", "bandit")
RANDOM = "random"
GENERATOR_POLICIES = ("default", "asha", "hybrid")
Job = tuple[str, str, str, int, int, int]  # trace path, generator, policy, seed, slots, boundary


def peer_order(seed: int, n_configs: int) -> list[int]:
    """The peers harness's configuration order of ``seed``."""
    return [int(i) for i in np.random.default_rng(seed).permutation(n_configs)]


def limit_seconds(trace: Trace, target: float) -> float:
    """The fastest single configuration from t = 0: the least time any one configuration, run
    alone, takes to report a value at least as good as ``target`` (inf if none does)."""
    curves = trace.curves if trace.mode == "max" else -trace.curves
    goal = target if trace.mode == "max" else -target
    with np.errstate(invalid="ignore"):
        hit = curves >= goal
    elapsed = np.cumsum(np.nan_to_num(trace.epoch_seconds), axis=1)
    times = np.where(hit, elapsed, np.inf)
    return float(times.min()) if times.size else math.inf


#: Options of a policy spec that are the study's, not the policy's: ``[curves] recalibrate``.
STUDY_OPTIONS = ("recalibrate",)


def policy_options(spec: str, boundary: int, target: float) -> tuple[str, dict[str, Any]]:
    """The name and options a policy runs with: defaults, the shared boundary for POP,
    EarlyTerm and Bandit, the target for POP (HyperDrive §3: a user input), and the options
    of a candidate written ``"hybrid:optimism=0.9,noise_guard=1"`` (values as JSON, else
    strings; :data:`STUDY_OPTIONS` among them are the simulator's, see :func:`run_one`)."""
    name, _, rest = spec.partition(":")
    options: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    if name in WITH_BOUNDARY:
        options["boundary"] = boundary
    if name == "pop":
        options["target"] = target
    return name, options


def run_one(job: Job) -> dict[str, Any]:
    """One simulated study -> its figures."""
    import torch

    from hpctune.simulator import simulate

    torch.set_num_threads(1)  # one thread per process (the pool has --jobs)
    path, generator, policy, seed, slots, boundary = job
    trace = Trace.load(path)
    target = trace.default_target()
    t0 = time.perf_counter()
    name, options = policy_options(policy, boundary, target)
    settings = {key: options.pop(key) for key in STUDY_OPTIONS if key in options}
    result = simulate(
        trace,
        name,
        options,
        slots,
        seed,
        order=peer_order(seed, trace.num_configs) if generator == RANDOM else None,
        generator=None if generator == RANDOM else generator,
        target=target,
        stop_at_target=True,
        **settings,
    )
    reached = result.time_to_target is not None and result.gpu_hours_to_target is not None
    return {
        "trace": Path(path).stem,
        "generator": generator,
        "policy": policy,
        "seed": seed,
        "slots": slots,
        "boundary": boundary,
        "target": target,
        "time_to_target": result.time_to_target,
        "worker_s_to_target": result.gpu_hours_to_target * 3600.0 if reached else None,
        "trials_started": result.trials_started,
        "wall_s": time.perf_counter() - t0,
    }


def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["trace"], r["generator"], r["policy"], r["seed"], r["slots"], r["boundary"])


def load_results(path: Path | None) -> list[dict[str, Any]]:
    """The results appended so far (a torn last line is skipped)."""
    out = []
    if path is not None and path.is_file():
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def run_all(jobs: list[Job], results: Path | None, workers: int, quiet: bool) -> list[dict]:
    """The figures of every job: those in ``results`` read back, the others run (appended to
    ``results`` as each ends)."""
    done = {_key(r): r for r in load_results(results)}
    wanted = {(Path(j[0]).stem, *j[1:]) for j in jobs}
    todo = [j for j in jobs if (Path(j[0]).stem, *j[1:]) not in done]
    if not quiet:
        print(f"{len(jobs) - len(todo)} runs already in {results}; {len(todo)} to run", flush=True)
    out = [r for k, r in done.items() if k in wanted]
    t0 = time.time()

    def record(items: Iterable[dict[str, Any]]) -> None:
        for i, r in enumerate(items, 1):
            out.append(r)
            if results is not None:
                with results.open("a") as f:
                    f.write(json.dumps(r) + "\n")
            if not quiet and (i % 50 == 0 or i == len(todo)):
                print(f"  {i}/{len(todo)} runs, {time.time() - t0:.0f} s", flush=True)

    if workers > 1 and len(todo) > 1:
        import multiprocessing as mp

        with mp.get_context("fork").Pool(workers) as pool:
            record(pool.imap_unordered(run_one, todo, chunksize=4))
    else:
        record(run_one(j) for j in todo)
    return out


def import_peers(source: Path, dest_dir: Path) -> Path:
    """Keep of a peers harness JSON what the tables need (per trace: target, limit, and per peer
    each seed's time and GPU-seconds to target) in ``dest_dir/peers-S<S>.json``."""
    full = json.loads(source.read_text())
    slots = int(full["protocol"]["workers_S"])
    small: dict[str, Any] = {
        "command": full["command"],
        "generated": full["generated"],
        "versions": full["versions"],
        "skipped_peers": full["skipped_peers"],
        "slots": slots,
        "traces": {},
    }
    for name, entry in full["traces"].items():
        small["traces"][name] = {
            "target": entry["target"],
            "sha256": entry["sha256"],
            "limit": entry["oracle"]["fastest_time_to_target"],
            "sanity": entry["sanity"],
            "peers": {
                peer: {
                    "seeds": [s["seed"] for s in v["per_seed"]],
                    "time_to_target": [_round(s["ttt"]) for s in v["per_seed"]],
                    "worker_s_to_target": [
                        _round(s["gpu_seconds"]) if s["ttt"] is not None else None
                        for s in v["per_seed"]
                    ],
                }
                for peer, v in entry["peers"].items()
            },
        }
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / f"peers-S{slots}.json"
    dest.write_text(json.dumps(small, indent=None, separators=(",", ":")) + "\n")
    return dest


def _round(x: float | None) -> float | None:
    """Nine significant digits: the peers' file stays small, the figures compare to 1e-8."""
    return None if x is None else float(f"{x:.9g}")


def load_peers(slots: int, results_dir: Path = RESULTS) -> dict[str, Any] | None:
    """The peers' figures at ``slots`` (``import_peers``'s file), or None if there is none."""
    path = results_dir / f"peers-S{slots}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def import_model_peers(source: Path, dest_dir: Path) -> list[Path]:
    """Keep of ``benchmarks/search_peers.py``'s JSON lines what the tables need, one file per S
    (``dest_dir/model-peers-S<S>.jsonl``)."""
    keys = ("trace", "peer", "seed", "slots", "target", "time_to_target", "worker_s_to_target")
    by_slots: dict[int, list[str]] = {}
    for r in load_results(source):
        by_slots.setdefault(int(r["slots"]), []).append(json.dumps({k: r[k] for k in keys}))
    dest_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for slots, lines in sorted(by_slots.items()):
        dest = dest_dir / f"model-peers-S{slots}.jsonl"
        dest.write_text("\n".join(sorted(lines)) + "\n")
        written.append(dest)
    return written


def load_model_peers(
    slots: int, trace: str, target: float, results_dir: Path = RESULTS
) -> dict[str, list[dict[str, Any]]]:
    """The model-based peers' runs on ``trace`` at ``slots`` (``benchmarks/search_peers.py
    --target default``, kept in ``model-peers-S<S>.jsonl``), by peer; {} if there are none."""
    path = results_dir / f"model-peers-S{slots}.jsonl"
    out: dict[str, list[dict[str, Any]]] = {}
    for r in load_results(path):
        if r["trace"] != trace or r["slots"] != slots:
            continue
        if not math.isclose(r["target"], target):
            raise SystemExit(f"{path}: {trace}'s target {r['target']} is not {target}")
        out.setdefault(r["peer"], []).append(r)
    return out


def write_peer_traces(traces: Sequence[Path], dest_dir: Path) -> None:
    """Copies of the traces with hpctune's default target as the harness's ``target``
    attribute (negated for ``mode = "min"``: the harness negates loss curves), and steps the
    trace lacks (``epoch_seconds`` NaN) at no cost: hpctune's simulator ends such a trial when
    its recorded steps end, the harness would add NaN to its clock."""
    import h5py

    dest_dir.mkdir(parents=True, exist_ok=True)
    for path in traces:
        trace = Trace.load(path)
        target = trace.default_target()
        dest = dest_dir / path.name
        shutil.copyfile(path, dest)
        with h5py.File(dest, "a") as f:
            f.attrs["target"] = target if trace.mode == "max" else -target
            seconds = f["epoch_seconds"][:]
            f["epoch_seconds"][...] = np.nan_to_num(seconds, nan=0.0)
        print(f"{dest}: target {target:.6g} ({trace.metric}, {trace.mode})")


def _median(values: Sequence[float | None]) -> float:
    """Median with a missing value (never reached) counted as infinite; inf if the median is."""
    x = [math.inf if v is None else float(v) for v in values]
    return float(np.median(x)) if x else math.nan


def _quantile(values: Sequence[float | None], q: float) -> float:
    x = np.sort([math.inf if v is None else float(v) for v in values])
    if not len(x):
        return math.nan
    pos = q * (len(x) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    if math.isinf(x[lo]) or math.isinf(x[hi]):
        return math.inf
    return float(x[lo] + (x[hi] - x[lo]) * (pos - lo))


def summarize(times: Sequence[float | None], work: Sequence[float | None]) -> dict[str, Any]:
    """Median and quartiles of the time to target, median worker-seconds to target, reached."""
    return {
        "time_to_target": _median(times),
        "q25": _quantile(times, 0.25),
        "q75": _quantile(times, 0.75),
        "worker_s_to_target": _median(work),
        "reached": sum(t is not None for t in times),
        "runs": len(times),
    }


def build_tables(
    results: list[dict[str, Any]], traces: Sequence[Path], slots: Sequence[int], seeds: int
) -> dict[str, Any]:
    """Per trace and S: every hpctune (policy, generator) and every peer summarised over the
    first ``seeds`` orders, the limit, the best of each side and their ratios."""
    tables: dict[str, Any] = {}
    for path in traces:
        trace = Trace.load(path)
        target = trace.default_target()
        per_slots: dict[str, Any] = {}
        for s in slots:
            rows: dict[str, dict[str, Any]] = {}
            for r in sorted(results, key=lambda r: r["seed"]):
                if r["trace"] != path.stem or r["slots"] != s or r["seed"] >= seeds:
                    continue
                label = f"{r['policy']}" + (
                    "" if r["generator"] == RANDOM else f"+{r['generator']}"
                )
                rows.setdefault(label, {"times": [], "work": [], "seeds": []})
                rows[label]["times"].append(r["time_to_target"])
                rows[label]["work"].append(r["worker_s_to_target"])
                rows[label]["seeds"].append(r["seed"])
            ours = {
                k: {
                    **summarize(v["times"], v["work"]),
                    "seeds": v["seeds"],
                    "per_seed_time": v["times"],
                    "per_seed_worker_s": v["work"],
                }
                for k, v in rows.items()
            }
            peers: dict[str, Any] = {}
            file = load_peers(s)
            entry = None if file is None else file["traces"].get(path.stem)
            if entry is not None and not math.isclose(entry["target"], target * _sign(trace)):
                raise SystemExit(
                    f"{path.stem}: the peers' target {entry['target']} is not {target}"
                )
            for peer, v in ({} if entry is None else entry["peers"]).items():
                keep = [i for i, seed in enumerate(v["seeds"]) if seed < seeds]
                peers[peer] = {
                    "seeds": [v["seeds"][i] for i in keep],
                    **summarize(
                        [v["time_to_target"][i] for i in keep],
                        [v["worker_s_to_target"][i] for i in keep],
                    ),
                    "per_seed_time": [v["time_to_target"][i] for i in keep],
                    "per_seed_worker_s": [v["worker_s_to_target"][i] for i in keep],
                }
            for peer, runs in load_model_peers(s, path.stem, target).items():
                runs = sorted((r for r in runs if r["seed"] < seeds), key=lambda r: r["seed"])
                peers[peer] = {
                    "seeds": [r["seed"] for r in runs],
                    **summarize(
                        [r["time_to_target"] for r in runs],
                        [r["worker_s_to_target"] for r in runs],
                    ),
                }
            best_ours = min(ours, key=lambda k: _rank(ours[k])) if ours else None
            best_peer = min(peers, key=lambda k: _rank(peers[k])) if peers else None
            limit = limit_seconds(trace, target)
            per_slots[str(s)] = {
                "hpctune": ours,
                "peers": peers,
                "limit": limit,
                "best_hpctune": best_ours,
                "best_peer": best_peer,
                **_ratios(ours, peers, best_ours, best_peer, limit),
            }
        tables[path.stem] = {"target": target, "mode": trace.mode, "slots": per_slots}
    return tables


def _rank(summary: dict[str, Any]) -> tuple[float, int]:
    """Sorts by median time to target, then by orders reached (more first)."""
    return (summary["time_to_target"], -summary["reached"])


def _sign(trace: Trace) -> float:
    return 1.0 if trace.mode == "max" else -1.0


def _ratios(
    ours: dict[str, Any],
    peers: dict[str, Any],
    best_ours: str | None,
    best_peer: str | None,
    limit: float,
) -> dict[str, float | None]:
    """The best hpctune policy and hybrid against the best peer (time to target), and the
    share of the distance from the best peer to the limit the best hpctune policy closes."""
    if best_ours is None or best_peer is None:
        return {"best_ratio": None, "hybrid_ratio": None, "closed": None}
    peer = peers[best_peer]["time_to_target"]
    mine = ours[best_ours]["time_to_target"]
    hybrid = ours.get("hybrid", {}).get("time_to_target")

    def ratio(a: float | None) -> float | None:
        return a / peer if a is not None and math.isfinite(a) and math.isfinite(peer) else None

    closed = None
    if math.isfinite(peer) and math.isfinite(mine) and peer > limit:
        closed = (peer - mine) / (peer - limit)
    return {"best_ratio": ratio(mine), "hybrid_ratio": ratio(hybrid), "closed": closed}


def _f(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if math.isinf(x):
        return "never"
    return f"{x:.{digits}g}"


def markdown(tables: dict[str, Any]) -> str:
    """The tables as Markdown: per S, one row per scheduler (hpctune's, then the peers') and one
    column per trace, "median time to target s / median worker-s to target" (reached/runs when
    not all reached); then the summary of the best of each side."""
    names = list(tables)
    slots = list(next(iter(tables.values()))["slots"]) if tables else []
    lines: list[str] = []
    for s in slots:
        rows = [tables[n]["slots"][s] for n in names]
        lines.append(
            f"\nS = {s}: median time to target s / median worker-s to target over the orders "
            "(reached/runs if not all)\n"
        )
        lines.append("| scheduler | " + " | ".join(names) + " |")
        lines.append("|---|" + "---|" * len(names))
        for side, prefix in (("hpctune", ""), ("peers", "peer: ")):
            labels = list(dict.fromkeys(k for row in rows for k in row[side]))
            for label in labels:
                cells = [_cell(row[side].get(label)) for row in rows]
                lines.append(f"| {prefix}{label} | " + " | ".join(cells) + " |")
        lines.append(
            "| limit (fastest single configuration) | "
            + " | ".join(_f(row["limit"]) for row in rows)
            + " |"
        )
    lines.append(
        "\n| trace | S | limit s | best hpctune | s | best peer | s | best / peer | "
        "hybrid / peer | distance closed |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        for s, row in tables[name]["slots"].items():
            best_o, best_p = row["best_hpctune"], row["best_peer"]
            closed = "-" if row["closed"] is None else f"{round(row['closed'], 2) + 0.0:.2f}"
            lines.append(
                f"| {name} | {s} | {_f(row['limit'])} | {best_o or '-'} | "
                f"{_f(row['hpctune'][best_o]['time_to_target']) if best_o else '-'} | "
                f"{best_p or '-'} | "
                f"{_f(row['peers'][best_p]['time_to_target']) if best_p else '-'} | "
                f"{_r(row['best_ratio'])} | {_r(row['hybrid_ratio'])} | {closed} |"
            )
    return "\n".join(lines) + "\n"


def _cell(v: dict[str, Any] | None) -> str:
    if v is None:
        return ""
    if math.isinf(v["time_to_target"]):
        return f"never ({v['reached']}/{v['runs']})"
    cell = f"{_f(v['time_to_target'])} / {_f(v['worker_s_to_target'])}"
    return cell if v["reached"] == v["runs"] else f"{cell} ({v['reached']}/{v['runs']})"


def _r(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", type=Path, default=TRACES)
    parser.add_argument("--only", nargs="+", default=None, help="trace names (file stems)")
    parser.add_argument("--slots", type=int, nargs="+", default=[4, 8, 16, 25])
    parser.add_argument("--seeds", type=int, default=25)
    parser.add_argument(
        "--policies", nargs="+", default=list(POLICIES), help='e.g. "hybrid:optimism=0.9"'
    )
    parser.add_argument("--generators", nargs="*", default=["tpe"], help="besides random order")
    parser.add_argument(
        "--generator-slots", type=int, nargs="*", default=[8], help="S the generators run at"
    )
    parser.add_argument(
        "--generator-policies", nargs="*", default=list(GENERATOR_POLICIES), help="with them"
    )
    parser.add_argument("--boundary", type=int, default=5, help="POP, EarlyTerm, Bandit")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--results", type=Path, default=None, help="JSON lines, resumable")
    parser.add_argument("--json", action="store_true", help="print only one JSON object")
    parser.add_argument("--quick", action="store_true", help="digits, S = 8, 3 orders, 3 policies")
    parser.add_argument("--peer-traces", type=Path, default=None, metavar="DIR")
    parser.add_argument("--import-peers", type=Path, default=None, metavar="HARNESS_JSON")
    parser.add_argument(
        "--import-model-peers", type=Path, default=None, metavar="SEARCH_PEERS_JSONL"
    )
    args = parser.parse_args()
    paths = sorted(args.traces.glob("*.h5"))
    if args.only:
        paths = [p for p in paths if p.stem in args.only]
    if args.peer_traces is not None:
        write_peer_traces(paths, args.peer_traces)
        return
    if args.import_peers is not None:
        print(import_peers(args.import_peers, RESULTS))
        return
    if args.import_model_peers is not None:
        print(*import_model_peers(args.import_model_peers, RESULTS))
        return
    if args.quick:
        paths = [p for p in paths if p.stem == "digits"]
        args.slots, args.seeds, args.generators = [8], 3, []
        args.policies = ["asha", "hybrid", "default"]
    generators = [RANDOM, *args.generators]
    # S = 8 first, then the generators, so that an interrupted measurement has the issue's
    # headline setting
    slots_order = sorted(args.slots, key=lambda s: (s != 8, s))
    jobs: list[Job] = [
        (str(p), g, pol, seed, s, args.boundary)
        for s in slots_order
        for g in generators
        for seed in range(args.seeds)
        for p in paths
        for pol in args.policies
        if g == RANDOM or (s in args.generator_slots and pol in args.generator_policies)
    ]
    t0 = time.time()
    results = run_all(jobs, args.results, args.jobs, quiet=args.json)
    tables = build_tables(results, paths, args.slots, args.seeds)
    out = {
        "quick": args.quick,
        "seeds": args.seeds,
        "boundary": args.boundary,
        "generators": generators,
        "wall_s": time.time() - t0,
        "tables": tables,
    }
    if args.json:
        print(json.dumps(out, allow_nan=True))
        return
    print(markdown(tables))
    print(f"{len(jobs)} runs, {out['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
