"""The model-based peers on hpctune's traces, under the protocol of ``benchmarks/search.py``.

Optuna's TPE with its Hyperband pruner, Syne Tune's BOHB (ASHA with a KDE searcher) and MOBSTER
(ASHA with a Gaussian-process searcher; Syne Tune 0.16 has dropped it, 0.14.2 keeps it in
``legacy_baselines``), and Ray Tune's BOHB searcher (``TuneBOHB``) replay each
trace of ``benchmarks/traces/`` on S = 8 workers in simulated time, every proposal answered with
the nearest configuration of the trace not used yet (``hpctune/simulator/nearest.py``: the same
rule as
hpctune's simulator), and the peer told the configuration that was actually evaluated.

Their packages are heavy and not hpctune's dependencies: install them into separate virtual
environments :

    python3 -m venv /tmp/search-peers && /tmp/search-peers/bin/pip install numpy h5py optuna \\
        "syne-tune[gpsearchers,kde]" "ray[tune]" hpbandster ConfigSpace statsmodels
    python3 -m venv /tmp/search-peers-st014 && /tmp/search-peers-st014/bin/pip install numpy \\
        h5py optuna "syne-tune[gpsearchers]==0.14.2" autograd scipy
    PYTHONPATH=. nice -n 10 /tmp/search-peers/bin/python benchmarks/search_peers.py \\
        --peers optuna_tpe_hyperband,syne_bohb,ray_bohb --results peers.jsonl
    PYTHONPATH=. nice -n 10 /tmp/search-peers-st014/bin/python benchmarks/search_peers.py \\
        --peers syne_mobster --results peers.jsonl
    python benchmarks/search.py --table-only --peers peers.jsonl

With ``--target default`` (``Trace.default_target``) the runs are ``benchmarks/policies.py``'s
model-based peers (``optuna_tpe_hyperband,syne_bohb,ray_bohb``; its docstring has the commands).

Protocol (as ``../shared/tools/peers/simulate_peers.py``): a trial of configuration i started at
t0 reports ``curves[i, e-1]`` at ``t0 + sum(epoch_seconds[i, :e])``; reports of all workers in
global time order; after each report the peer may stop the trial and the worker starts the next
trial at once; no other costs. Target, budget and the figures are ``benchmarks/search.py``'s.
Runs found in ``--results`` are not run again, and runs go seed by seed across traces and peers,
so a run stopped early leaves every cell with its first seeds.
Stopping: Optuna's ``HyperbandPruner(min_resource=1, max_resource=epochs, reduction_factor=3)``;
Syne Tune's BOHB and MOBSTER are ASHA schedulers (grace period 1, reduction factor 3, one
bracket); Ray's ``TuneBOHB`` runs under Ray's ``AsyncHyperBandScheduler`` (grace period 1,
reduction factor 3), and is given each trial's value at ASHA's rungs as BOHB budgets
(``hyperband_info``), since its own ``HyperBandForBOHB`` pauses and resumes trials through
Ray's trial runner, which a replay has not.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from hpctune.policies.generators._optuna_space import (
    Dimension,
    all_dimensions,
    draw_config,
    encode_config,
)
from hpctune.simulator.nearest import NearestConfigurations, trace_space
from hpctune.simulator.traces import Trace

REPO = Path(__file__).resolve().parent.parent
SLOTS = 8
PEERS = ("optuna_tpe_hyperband", "syne_bohb", "syne_mobster", "ray_bohb")


def peers_target(trace: Trace) -> float:
    """As ``benchmarks/search.py``: the 97th percentile of final values (metric direction)."""
    q = 0.97 if trace.mode == "max" else 0.03
    return float(np.nanquantile(trace.curves[:, -1], q))


def budget_seconds(trace: Trace, slots: int) -> float:
    """As ``benchmarks/search.py``: a quarter of every configuration's full run on S slots."""
    return float(np.nansum(trace.epoch_seconds)) / slots / 4.0


class Peer:
    """A peer in the replay: ``propose(tid)`` a flat configuration (dimension name -> value),
    ``add(tid, flat)`` the one evaluated, ``result(tid, epoch, value) -> stop``, ``end``.
    Values are larger-is-better."""

    def __init__(self, dims: list[Dimension], epochs: int, seed: int) -> None:
        self.dims, self.epochs, self.seed = dims, epochs, seed

    def propose(self, tid: int) -> dict[str, Any]:
        raise NotImplementedError

    def add(self, tid: int, flat: dict[str, Any]) -> None:
        """Start trial ``tid`` with the configuration evaluated."""

    def result(self, tid: int, epoch: int, value: float) -> bool:
        raise NotImplementedError

    def end(self, tid: int, epoch: int, value: float, stopped: bool) -> None:
        """Trial ``tid`` ended (stopped by the peer, or at its last epoch)."""


class OptunaTPEHyperband(Peer):
    """Optuna's TPESampler with its HyperbandPruner (ask/tell); the trial's parameters are
    overwritten with the evaluated configuration's before the sampler sees its results."""

    def __init__(self, dims: list[Dimension], epochs: int, seed: int) -> None:
        super().__init__(dims, epochs, seed)
        import optuna

        optuna.logging.set_verbosity(optuna.logging.ERROR)
        self.study = optuna.create_study(
            sampler=optuna.samplers.TPESampler(seed=seed),
            pruner=optuna.pruners.HyperbandPruner(
                min_resource=1, max_resource=epochs, reduction_factor=3
            ),
            direction="maximize",
            study_name=f"peers_seed{seed}",
        )
        self.trials: dict[int, Any] = {}
        self.TrialState = optuna.trial.TrialState

    def propose(self, tid: int) -> dict[str, Any]:
        trial = self.study.ask()
        self.trials[tid] = trial
        return {d.name: trial._suggest(d.name, d.distribution) for d in self.dims}

    def add(self, tid: int, flat: dict[str, Any]) -> None:
        trial = self.trials[tid]
        for d in self.dims:
            if d.name in flat:
                internal = d.distribution.to_internal_repr(flat[d.name])
                self.study._storage.set_trial_param(
                    trial._trial_id, d.name, internal, d.distribution
                )

    def result(self, tid: int, epoch: int, value: float) -> bool:
        trial = self.trials[tid]
        trial.report(value, epoch)
        return bool(trial.should_prune())

    def end(self, tid: int, epoch: int, value: float, stopped: bool) -> None:
        trial = self.trials.pop(tid)
        if stopped:
            self.study.tell(trial, state=self.TrialState.PRUNED)
        else:
            self.study.tell(
                trial,
                value if math.isfinite(value) else None,
                state=None if math.isfinite(value) else self.TrialState.FAIL,
            )


def _syne_space(dims: list[Dimension]) -> dict[str, Any]:
    from optuna.distributions import CategoricalDistribution, IntDistribution
    from syne_tune.config_space import choice, lograndint, loguniform, randint, uniform

    space: dict[str, Any] = {}
    for d in dims:
        dist = d.distribution
        if isinstance(dist, CategoricalDistribution):
            space[d.name] = choice(list(dist.choices))
        elif isinstance(dist, IntDistribution):
            space[d.name] = (lograndint if dist.log else randint)(dist.low, dist.high)
        else:
            space[d.name] = (loguniform if dist.log else uniform)(dist.low, dist.high)
    return space


class SyneTunePeer(Peer):
    """Syne Tune 0.16's BOHB (ASHA + KDE searcher), driven as its Tuner does."""

    def __init__(self, dims: list[Dimension], epochs: int, seed: int) -> None:
        super().__init__(dims, epochs, seed)
        from syne_tune.backend.trial_status import Trial
        from syne_tune.optimizer.baselines import BOHB
        from syne_tune.optimizer.scheduler import SchedulerDecision

        np.random.seed(seed)  # noqa: NPY002 - ASHA draws brackets from numpy's global generator
        self.Trial, self.STOP = Trial, SchedulerDecision.STOP
        self.s = BOHB(
            _syne_space(dims),
            metric="val",
            time_attr="epoch",
            max_t=epochs,
            do_minimize=False,
            random_seed=seed,
        )
        self.trials: dict[int, Any] = {}

    def propose(self, tid: int) -> dict[str, Any]:
        suggestion = self.s.suggest()
        return dict(suggestion.config)

    def add(self, tid: int, flat: dict[str, Any]) -> None:
        from datetime import datetime

        trial = self.Trial(trial_id=tid, config=flat, creation_time=datetime(2000, 1, 1))
        self.trials[tid] = trial
        self.s.on_trial_add(trial)

    def result(self, tid: int, epoch: int, value: float) -> bool:
        return (
            self.s.on_trial_result(self.trials[tid], {"epoch": epoch, "val": value}) == self.STOP
        )

    def end(self, tid: int, epoch: int, value: float, stopped: bool) -> None:
        trial = self.trials.pop(tid)
        if stopped:
            self.s.on_trial_remove(trial)
        else:
            self.s.on_trial_complete(trial, {"epoch": epoch, "val": value})


class SyneMobsterPeer(SyneTunePeer):
    """Syne Tune 0.14's MOBSTER (``legacy_baselines``: ASHA stopping + a GP searcher over
    (configuration, epoch)), with the legacy scheduler API (``suggest(trial_id)``)."""

    def __init__(self, dims: list[Dimension], epochs: int, seed: int) -> None:
        Peer.__init__(self, dims, epochs, seed)
        from syne_tune.backend.trial_status import Trial
        from syne_tune.optimizer.legacy_baselines import MOBSTER
        from syne_tune.optimizer.scheduler import SchedulerDecision

        np.random.seed(seed)  # noqa: NPY002
        self.Trial, self.STOP = Trial, SchedulerDecision.STOP
        space = {**_syne_space(dims), "epochs": epochs}
        self.s = MOBSTER(
            space,
            metric="val",
            resource_attr="epoch",
            max_resource_attr="epochs",
            mode="max",
            random_seed=seed,
            grace_period=1,
            reduction_factor=3,
        )
        self.trials: dict[int, Any] = {}

    def propose(self, tid: int) -> dict[str, Any]:
        suggestion = self.s.suggest(tid)
        return {k: v for k, v in suggestion.config.items() if k != "epochs"}

    def add(self, tid: int, flat: dict[str, Any]) -> None:
        super().add(tid, {**flat, "epochs": self.epochs})


class RayBOHBPeer(Peer):
    """Ray Tune's ``TuneBOHB`` searcher under Ray's ``AsyncHyperBandScheduler``."""

    def __init__(self, dims: list[Dimension], epochs: int, seed: int) -> None:
        super().__init__(dims, epochs, seed)
        import ConfigSpace as CS
        from optuna.distributions import CategoricalDistribution, IntDistribution
        from ray.tune.schedulers import AsyncHyperBandScheduler, TrialScheduler
        from ray.tune.search.bohb import TuneBOHB

        np.random.seed(seed)  # noqa: NPY002
        space = CS.ConfigurationSpace(seed=seed)
        self.choices: dict[str, list[Any]] = {}
        self.bounds: dict[str, tuple[float, float]] = {}
        for d in dims:
            dist = d.distribution
            if isinstance(dist, CategoricalDistribution):
                self.choices[d.name] = list(dist.choices)
                hp: Any = CS.CategoricalHyperparameter(
                    d.name, [str(i) for i in range(len(dist.choices))]
                )
            elif isinstance(dist, IntDistribution):
                hp = CS.UniformIntegerHyperparameter(d.name, dist.low, dist.high, log=dist.log)
            else:
                hp = CS.UniformFloatHyperparameter(d.name, dist.low, dist.high, log=dist.log)
                self.bounds[d.name] = (hp.lower, hp.upper)
            space.add(hp)
        self.searcher = TuneBOHB(space, metric="val", mode="max", seed=seed)
        self.scheduler = AsyncHyperBandScheduler(
            time_attr="epoch",
            metric="val",
            mode="max",
            max_t=epochs,
            grace_period=1,
            reduction_factor=3,
        )
        self.STOP = TrialScheduler.STOP
        self.rungs = {3**k for k in range(20) if 3**k < epochs} | {epochs}

    def _to_flat(self, config: dict[str, Any]) -> dict[str, Any]:
        return {k: self.choices[k][int(v)] if k in self.choices else v for k, v in config.items()}

    def _from_flat(self, flat: dict[str, Any]) -> dict[str, Any]:
        # ConfigSpace 1 rounds a float's bounds to 13 decimals, which can leave a trace's
        # extreme value (digits-cnn's lr, dropout) outside them: clip it in
        out = {}
        for k, v in flat.items():
            if k in self.choices:
                out[k] = str(self.choices[k].index(v))
            elif k in self.bounds:
                out[k] = min(max(v, self.bounds[k][0]), self.bounds[k][1])
            else:
                out[k] = v
        return out

    def propose(self, tid: int) -> dict[str, Any]:
        return self._to_flat(self.searcher.suggest(str(tid)))

    def add(self, tid: int, flat: dict[str, Any]) -> None:
        # the searcher learns the configuration evaluated, not the one it proposed
        self.searcher.trial_to_params[str(tid)] = self._from_flat(flat)
        self.scheduler.on_trial_add(None, _RayTrial(tid))

    def result(self, tid: int, epoch: int, value: float) -> bool:
        result: dict[str, Any] = {"epoch": epoch, "val": value}
        if epoch in self.rungs and math.isfinite(value):  # TuneBOHB learns only from budgets
            self.searcher.on_trial_result(
                str(tid), {**result, "hyperband_info": {"budget": epoch}}
            )
        return bool(self.scheduler.on_trial_result(None, _RayTrial(tid), result) == self.STOP)

    def end(self, tid: int, epoch: int, value: float, stopped: bool) -> None:
        result = {"epoch": epoch, "val": value}
        self.scheduler.on_trial_complete(None, _RayTrial(tid), result)
        self.searcher.on_trial_complete(str(tid), result)


class _RayTrial:
    __slots__ = ("trial_id",)

    def __init__(self, tid: int) -> None:
        self.trial_id = str(tid)


def make_peer(name: str, dims: list[Dimension], epochs: int, seed: int) -> Peer:
    """The peer ``name`` of :data:`PEERS`."""
    classes = {
        "optuna_tpe_hyperband": OptunaTPEHyperband,
        "syne_bohb": SyneTunePeer,
        "syne_mobster": SyneMobsterPeer,
        "ray_bohb": RayBOHBPeer,
    }
    return classes[name](dims, epochs, seed)  # type: ignore[abstract]


def replay(
    trace: Trace, peer_name: str, seed: int, slots: int, target_kind: str = "q97"
) -> dict[str, Any]:
    """One run of the protocol; returns ``benchmarks/search.py``'s figures, and the
    worker-seconds to the target. ``target_kind`` "default": ``Trace.default_target`` (the
    target of ``benchmarks/policies.py``) instead of the 97th percentile of final values."""
    space = trace_space(trace)
    dims = all_dimensions(space)
    _n_cfg, n_ep = trace.curves.shape
    sign = trace.sign
    curves = sign * trace.curves  # larger is better inside
    secs = trace.epoch_seconds
    target = trace.default_target() if target_kind == "default" else peers_target(trace)
    budget = budget_seconds(trace, slots)
    peer = make_peer(peer_name, dims, n_ep, seed)
    nearest = NearestConfigurations(space, trace.hparams)
    heap: list[tuple[float, int, int, int, int]] = []
    counter = 0
    started = 0
    best = -math.inf
    best_at_budget = -math.inf
    reached: float | None = None
    worker_s: float | None = None
    running: dict[int, float] = {}  # trial -> start time
    busy_closed = 0.0

    def start(now: float) -> None:
        nonlocal counter, started
        if nearest.used.all():
            return
        tid = started
        proposal = peer.propose(tid)
        config = draw_config(space, lambda d: proposal[d.name])
        row = nearest.take(config)
        assert row is not None
        peer.add(tid, encode_config(space, trace.hparams[row]))
        started += 1
        running[tid] = now
        heapq.heappush(heap, (now + secs[row, 0], counter, tid, row, 1))
        counter += 1

    for _ in range(slots):
        start(0.0)
    while heap:
        t, _, tid, row, epoch = heapq.heappop(heap)
        if reached is not None and t > budget:
            break
        value = float(curves[row, epoch - 1])
        if math.isfinite(value):
            best = max(best, value)
            if t <= budget:
                best_at_budget = best
            if reached is None and value >= sign * target:
                reached = t
                worker_s = busy_closed + sum(t - since for since in running.values())
        stop = peer.result(tid, epoch, value)
        last = epoch == n_ep or not math.isfinite(float(secs[row, epoch]))
        if stop or last:
            peer.end(tid, epoch, value, stop)
            busy_closed += t - running.pop(tid)
            start(t)
        else:
            heapq.heappush(heap, (t + secs[row, epoch], counter, tid, row, epoch + 1))
            counter += 1
    return {
        "trace": Path(trace._where).stem,
        "peer": peer_name,
        "generator": peer_name,
        "policy": "own",
        "seed": seed,
        "slots": slots,
        "target": target,
        "budget": budget,
        "time_to_target": reached,
        "worker_s_to_target": worker_s,
        "best_at_budget": None if math.isinf(best_at_budget) else sign * best_at_budget,
        "trials_started": started,
    }


def run_job(job: tuple[str, str, int, int, str]) -> dict[str, Any]:
    """One (trace, peer, seed, slots) run, with its wall time."""
    import logging

    warnings.filterwarnings("ignore")
    for name in ("syne_tune", "ray", "optuna", "hpbandster"):
        logging.getLogger(name).setLevel(logging.ERROR)
    path, peer, seed, slots, target_kind = job
    t0 = time.perf_counter()
    out = replay(Trace.load(path), peer, seed, slots, target_kind)
    out["wall_s"] = time.perf_counter() - t0
    return out


def main(argv: list[str] | None = None) -> int:
    """Run what is missing from ``--results``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", type=Path, default=REPO / "benchmarks/traces")
    parser.add_argument("--only", default=None, help="comma list of trace names")
    parser.add_argument("--peers", default=",".join(PEERS))
    parser.add_argument("--seeds", type=int, default=25)
    parser.add_argument("--slots", type=int, default=SLOTS)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--results", type=Path, default=Path("peers.jsonl"))
    parser.add_argument(
        "--target",
        choices=("q97", "default"),
        default="q97",
        help="q97: benchmarks/search.py's; default: Trace.default_target (policies.py's)",
    )
    args = parser.parse_args(argv)
    paths = sorted(args.traces.glob("*.h5"))
    if args.only:
        paths = [p for p in paths if p.stem in set(args.only.split(","))]
    done = set()
    if args.results.is_file():
        for line in args.results.read_text().splitlines():
            with_key = json.loads(line)
            done.add((with_key["trace"], with_key["peer"], with_key["seed"], with_key["slots"]))
    jobs = [
        (str(p), peer, seed, args.slots, args.target)
        for seed in range(args.seeds)  # seed-major: a partial run has every cell's first seeds
        for p in paths
        for peer in args.peers.split(",")
        if (p.stem, peer, seed, args.slots) not in done
    ]
    print(f"{len(jobs)} runs to do", flush=True)
    import multiprocessing as mp

    with mp.get_context("fork").Pool(args.jobs) as pool, args.results.open("a") as f:
        for i, r in enumerate(pool.imap_unordered(run_job, jobs, chunksize=1), 1):
            f.write(json.dumps(r) + "\n")
            f.flush()
            if i % 10 == 0:
                print(f"  {i}/{len(jobs)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
