"""How the cost of one policy decision grows with the study (issue 15, item 2).

Synthetic studies built with the project's own types (:class:`StudyView`, :class:`TrialView`):
N trials (1k, 5k, 10k, 20k by default) with curves of up to 100 steps and a mix of statuses (100
running, the rest queued, suspended, completed, terminated, failed; PBT: generations of 128
short sessions). For each policy whose decisions were made to scale:

* **BOUNDARY**: the mean seconds per decision over a pass of the 100 running trials sharing one
  view (the events of one instant of the controller), in the steady state: after a first pass
  (reported as ``cold pass``, seconds for the whole pass: a restarted controller, new caches),
  every running trial reports one more step twice, and the second of these passes is timed;
* **SLOT_FREE**: the mean seconds per decision with 100 free slots, a new view each call (the
  controller builds one per call; unchanged trials keep their view objects), after one call with
  no free slot (SHA and Hyperband take the trials into brackets then).

Each figure is measured for this tree's code and for a reference revision (``--ref``, default
the commit before the policies were made to scale: extracted with ``git archive`` and run in a
subprocess), printed side by side. A slow
measurement stops after ``--budget`` seconds (the mean is over the decisions made by then).

    python benchmarks/policy_scale.py [--sizes 1000 5000 10000 20000] [--ref REVISION]
        [--policies median asha ...] [--budget 3] [--json] [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
BEFORE = "302f955"  # main before the policies were made to scale (issue 15 item 2)
POLICIES = ("asha", "median", "sha", "hyperband", "pop", "pbt", "pbt-truncation")
OPTIONS: dict[str, dict[str, Any]] = {
    "asha": {"grace_period": 1, "reduction_factor": 4},
    "median": {},
    "sha": {},
    "hyperband": {},
    "pop": {"boundary": 1},
    "pbt": {"population_size": 128, "steps_per_generation": 5},
    "pbt-truncation": {"population_size": 100, "perturbation_interval": 5},
}
RUNNING = 100
FREE = 100
MAX_STEPS = 100


# -- synthetic studies (worker side: imports the tree under test) ------------------------------


def _statuses(n: int, rng: np.random.Generator) -> list[Any]:
    from hpctune.study.states import TrialStatus as S

    kinds = [S.QUEUED, S.SUSPENDED, S.COMPLETED, S.TERMINATED, S.FAILED]
    weights = np.array([0.02, 0.05, 0.35, 0.55, 0.03])
    out = list(rng.choice(len(kinds), size=n, p=weights / weights.sum()))
    statuses = [kinds[i] for i in out]
    for i in rng.choice(n, size=min(RUNNING, n), replace=False):
        statuses[int(i)] = S.RUNNING
    return statuses


def study(n: int, seed: int = 0) -> Any:
    """A study of ``n`` trials with curves of up to :data:`MAX_STEPS` steps (metric ``acc``)."""
    from hpctune.policies import StudyView, TrialView
    from hpctune.study.states import TrialStatus as S

    rng = np.random.default_rng(seed)
    trials = {}
    for tid, status in enumerate(_statuses(n, rng)):
        if status is S.COMPLETED:
            length = MAX_STEPS
        elif status is S.QUEUED:
            length = 0
        else:
            length = int(rng.integers(1, MAX_STEPS))
        steps = np.arange(1, length + 1, dtype=np.int64)
        limit, rate = rng.uniform(0.3, 0.95), rng.uniform(0.02, 0.2)
        values = np.round(limit * (1 - np.exp(-rate * steps)) + rng.normal(0, 0.01, length), 4)
        seconds = rng.uniform(1.0, 3.0)
        trials[tid] = TrialView(
            trial_id=tid,
            status=status,
            params={"lr": float(rng.uniform(1e-4, 1e-1)), "config": tid},
            step=length,
            steps=steps,
            values=values,
            times=steps * seconds,
            checkpoint_step=length or None,
            generation=0,
            last_metrics={"acc": float(values[-1])} if length else {},
        )
    return StudyView(
        metric="acc",
        mode="max",
        max_steps=MAX_STEPS,
        boundary=1,
        now=float(MAX_STEPS * 3.0),
        trials=trials,
        free_slots=0,
        total_slots=RUNNING,
        trials_remaining=None,
        bounds=(0.0, 1.0),
        random_level=0.1,
    )


def pbt_study(n: int, population: int, steps: int, seed: int = 0) -> Any:
    """A PBT study: ``n`` short sessions in generations of ``population``, every older
    generation initiated, the last complete one waiting to initiate (so 100 free slots get 100
    reproductions)."""
    from hpctune.policies import StudyView, TrialView
    from hpctune.study.states import TrialStatus as S

    rng = np.random.default_rng(seed)
    generations = max(n // population, 2)
    trials = {}
    previous: list[int] = []
    for g in range(generations):
        ids = []
        for i in range(population):
            tid = len(trials)
            end = steps * (g + 1)
            value = float(np.round(rng.uniform(0.1, 0.9) + 0.001 * g, 4))
            failed = rng.random() < 0.02
            trials[tid] = TrialView(
                trial_id=tid,
                status=S.FAILED if failed else S.COMPLETED,
                params={"lr": float(rng.uniform(1e-4, 1e-1))},
                step=end,
                steps=np.arange(end - steps + 1, end + 1, dtype=np.int64),
                values=np.full(steps, value),
                times=np.arange(end - steps + 1, end + 1, dtype=float),
                checkpoint_step=end,
                parent_trial=previous[i] if previous else None,
                parent_step=end - steps if previous else None,
                end_step=end,
                generation=g,
                initiator=previous[i] if previous else None,
                last_metrics={"acc": value},
            )
            ids.append(tid)
        previous = ids
    return StudyView(
        metric="acc",
        mode="max",
        max_steps=steps * (generations + 10),
        boundary=1,
        now=1e6,
        trials=trials,
        free_slots=0,
        total_slots=FREE,
        trials_remaining=None,
    )


def predictions(view: Any, seed: int = 0, before: Any = None) -> dict[int, Any]:
    """Plausible learning-curve predictions of the trials POP ranks (not ended ones); with
    ``before``, new fits only of the trials that changed since that view (as the controller
    keeps the prediction objects of the others)."""
    from scipy.special import ndtri

    from hpctune.curves.predict import DECIMALS, LEVELS, CurvePrediction

    rng = np.random.default_rng(seed)
    nodes = ndtri(np.asarray(LEVELS))
    out = dict(before.predictions) if before is not None else {}
    for tid, trial in view.trials.items():
        if before is not None and before.trials.get(tid) is trial:
            continue
        n = len(trial.values)
        if trial.status.is_final or n < 2 or n >= view.max_steps:
            continue
        ahead = np.arange(1, view.max_steps - n + 1)
        centre = np.clip(trial.values[-1] + 0.2 * (1 - np.exp(-ahead / 20)), 0, 1)
        q = np.round(centre[:, None] + rng.uniform(0.01, 0.1) * nodes[None, :], DECIMALS)
        out[tid] = CurvePrediction(
            n=n,
            x_max=view.max_steps,
            bounds=view.bounds,
            mode="max",
            u_quantiles=np.maximum.accumulate(q, axis=1),
            sigma=0.05,
        )
    return out


def advance(view: Any, seed: int = 1) -> Any:
    """The next instant: every running trial reported one more step (new views for those
    trials only, as the controller's ``_trial_view``)."""
    from hpctune.study.states import TrialStatus as S

    rng = np.random.default_rng(seed)
    trials = dict(view.trials)
    for tid, t in view.trials.items():
        if t.status is not S.RUNNING or not len(t.steps) or t.steps[-1] >= view.max_steps - 1:
            continue
        step = int(t.steps[-1]) + 1
        value = float(np.round(t.values[-1] + rng.normal(0.002, 0.005), 4))
        trials[tid] = dataclasses.replace(
            t,
            step=step,
            steps=np.append(t.steps, step),
            values=np.append(t.values, value),
            times=np.append(t.times, t.times[-1] + 2.0),
            last_metrics={"acc": value},
        )
    return dataclasses.replace(view, trials=trials, now=view.now + 2.0)


def asha_state(view: Any) -> dict[str, Any]:
    """ASHA's state after every ended or waiting trial was judged at each rung it reached."""
    from hpctune.study.states import TrialStatus as S

    milestones = [64, 16, 4, 1]  # grace 1, eta 4, max_t 100
    rungs = []
    for m in milestones:
        recorded = [
            [tid, float(t.values[m - 1])]
            for tid, t in view.trials.items()
            if t.status is not S.RUNNING and len(t.values) >= m
        ]
        rungs.append([m, recorded])
    return {
        "max_t": view.max_steps,
        "brackets": [{"rungs": rungs, "stopped": []}],
        "assigned": [[tid, 0] for tid in view.trials],
    }


def _timed(
    calls: list[Callable[[], Any]], budget: float, *, whole: bool = False
) -> tuple[float, int]:
    """Mean seconds per call (all of them if ``whole``, else until ``budget`` is spent)."""
    spent, done = 0.0, 0
    for call in calls:
        start = time.perf_counter()
        call()
        spent += time.perf_counter() - start
        done += 1
        if spent > budget and not whole:
            break
    return spent / max(done, 1), done


def measure(name: str, n: int, budget: float) -> dict[str, Any]:
    """The figures of policy ``name`` on a study of ``n`` trials."""
    from hpctune.policies import Event, StudyContext, make_policy
    from hpctune.study.states import TrialStatus as S

    if name == "pbt":
        o = OPTIONS[name]
        view = pbt_study(n, o["population_size"], o["steps_per_generation"])
    else:
        view = study(n)
    context = StudyContext(max_steps=view.max_steps, mode=view.mode, boundary=view.boundary)
    policy = make_policy(name, OPTIONS[name], context)
    if name == "pop":
        view = dataclasses.replace(view, predictions=predictions(view))
    if name == "asha":
        policy.load_state_dict(json.loads(json.dumps(asha_state(view))))
    figures: dict[str, Any] = {"trials": len(view.trials)}

    if policy.traits.boundary_decisions:
        rng = np.random.default_rng(0)

        def boundary_pass(v: Any) -> list[Callable[[], Any]]:
            running = [t for t in v.trials.values() if t.status is S.RUNNING and len(t.steps)]
            return [
                lambda t=t: list(
                    policy.decide(v, Event.boundary(t.trial_id, int(t.steps[-1])), rng).actions
                )
                for t in running
            ]

        cold = boundary_pass(view)
        mean, done = _timed(cold, budget)
        figures["boundary_cold_pass"] = mean * len(cold)  # (extrapolated if cut short)
        figures["boundary_cold_decisions"] = done
        for seed in (1, 2):  # two more instants; the second is timed
            before, view = view, advance(view, seed)
            if name == "pop":
                view = dataclasses.replace(view, predictions=predictions(view, seed, before))
            warm = boundary_pass(view)
            mean, done = _timed(warm, budget)
        figures["boundary"] = mean
        figures["boundary_pass"] = mean * len(warm)
        figures["boundary_decisions"] = done

    rng = np.random.default_rng(1)
    list(policy.decide(dataclasses.replace(view, free_slots=0), Event.slot_free(0), rng).actions)
    calls = [
        lambda: list(
            policy.decide(
                dataclasses.replace(view, free_slots=FREE), Event.slot_free(FREE), rng
            ).actions
        )
        for _ in range(20)
    ]
    mean, done = _timed(calls, budget)
    figures["slot_free"] = mean
    figures["slot_free_decisions"] = done
    return figures


def worker(names: list[str], sizes: list[int], budget: float) -> dict[str, Any]:
    """Every figure of this process's ``hpctune`` (the tree on ``PYTHONPATH``)."""
    import hpctune

    out: dict[str, Any] = {"hpctune": hpctune.__file__, "figures": {}}
    for name in names:
        for n in sizes:
            out["figures"][f"{name}:{n}"] = measure(name, n, budget)
            print(f"  {name} {n}: done", file=sys.stderr, flush=True)
    return out


# -- the comparison (parent side) ---------------------------------------------------------------


def extract(ref: str, into: Path) -> Path:
    """The ``hpctune`` package of git revision ``ref``, unpacked under ``into``."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", ref, "hpctune"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def run_worker(tree: Path, names: list[str], sizes: list[int], budget: float) -> dict[str, Any]:
    """Run :func:`worker` in a subprocess that imports ``hpctune`` from ``tree``."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    args = [sys.executable, str(Path(__file__).resolve()), "--worker", "--budget", str(budget)]
    args += ["--policies", *names, "--sizes", *map(str, sizes)]
    result = subprocess.run(args, env=env, cwd=tree, check=True, capture_output=True, text=True)
    data: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return data


def _show(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "—"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


def _ratio(before: float | None, after: float | None) -> str:
    if before is None or after is None or after <= 0:
        return "—"
    return f"×{before / after:.0f}" if before / after >= 10 else f"×{before / after:.1f}"


def table(before: dict[str, Any], after: dict[str, Any], ref: str) -> str:
    """The figures side by side, one line per policy and size."""
    head = (
        f"{'policy':<15}{'trials':>7} | {'BOUNDARY s/decision':^33} | "
        f"{'cold pass (100)':^21} | {'SLOT_FREE (100 slots) s/decision':^33}"
    )
    sub = (
        f"{'':<15}{'':>7} | {ref:>11}{'after':>11}{'':>11} | {ref:>10}{'after':>11} | "
        f"{ref:>11}{'after':>11}{'':>11}"
    )
    lines = [head, sub, "-" * len(head)]
    for key, new in after["figures"].items():
        old = before["figures"].get(key, {})
        name, n = key.split(":")
        speedup = _ratio(old.get("boundary"), new.get("boundary"))
        lines.append(
            f"{name:<15}{int(n):>7} | {_show(old.get('boundary')):>11}"
            f"{_show(new.get('boundary')):>11}{speedup:>11}"
            f" | {_show(old.get('boundary_cold_pass')):>10}"
            f"{_show(new.get('boundary_cold_pass')):>11} | {_show(old.get('slot_free')):>11}"
            f"{_show(new.get('slot_free')):>11}"
            f"{_ratio(old.get('slot_free'), new.get('slot_free')):>11}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000, 10000, 20000])
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), choices=POLICIES)
    parser.add_argument(
        "--ref", default=BEFORE, help="git revision to compare with (default: before the change)"
    )
    parser.add_argument("--budget", type=float, default=3.0, help="seconds per measurement")
    parser.add_argument("--json", action="store_true", help="print only one JSON object")
    parser.add_argument("--quick", action="store_true", help="sizes 200 and 1000 (smoke run)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [200, 1000] if args.quick else args.sizes
    if args.worker:
        print(json.dumps(worker(args.policies, sizes, args.budget)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        before = run_worker(extract(args.ref, Path(tmp)), args.policies, sizes, args.budget)
    after = run_worker(REPO, args.policies, sizes, args.budget)
    if args.json:
        print(json.dumps({"ref": args.ref, "before": before, "after": after, "quick": args.quick}))
        return
    print(f"before: {args.ref} ({before['hpctune']}); after: {after['hpctune']}")
    print(table(before, after, args.ref))


if __name__ == "__main__":
    main()
