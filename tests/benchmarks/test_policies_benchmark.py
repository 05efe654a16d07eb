"""Smoke test of ``benchmarks/policies.py --quick``: finite, consistent figures, and hpctune's
ASHA and Default equal to Ray Tune's ASHA and Optuna's no-op pruner on the peers' orders."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "policies.py"
PEERS = REPO / "benchmarks" / "results" / "peers-S8.json"


@pytest.fixture(scope="module")
def quick() -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, "--json prints only the JSON line"
    out: dict[str, Any] = json.loads(lines[0])
    return out


def _row(quick: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = quick["tables"]["digits"]["slots"]["8"]
    return row


def test_quick_figures_are_finite_and_consistent(quick: dict[str, Any]) -> None:
    assert quick["quick"] is True
    row = _row(quick)
    assert set(row["hpctune"]) == {"asha", "hybrid", "default"}
    for name, r in row["hpctune"].items():
        assert r["runs"] == quick["seeds"] == 3, name
        assert r["reached"] == 3, name
        assert r["q25"] <= r["time_to_target"] <= r["q75"], name
        for t, w in zip(r["per_seed_time"], r["per_seed_worker_s"], strict=True):
            assert math.isfinite(t), name
            assert math.isfinite(w), name
            # every slot is busy from t = 0 until the target (128 configurations, 8 slots)
            assert w == pytest.approx(8 * t, rel=1e-9), name
    assert 0 < row["limit"] < min(r["time_to_target"] for r in row["hpctune"].values())
    best = row["best_hpctune"]
    assert row["hpctune"][best]["time_to_target"] == min(
        r["time_to_target"] for r in row["hpctune"].values()
    )


def test_quick_matches_the_peers_harness_on_its_orders(quick: dict[str, Any]) -> None:
    assert PEERS.is_file(), "benchmarks/results/peers-S8.json is committed with the benchmark"
    row = _row(quick)
    peers = row["peers"]
    assert peers, "the peers' figures are read"
    # the same orders and target: Ray's ASHA is hpctune's ASHA, Optuna's no-op pruner is Default
    for ours, theirs in (("asha", "ray_asha"), ("default", "optuna_nop")):
        mine, peer = row["hpctune"][ours], peers[theirs]
        assert mine["seeds"] == peer["seeds"] == [0, 1, 2]
        assert mine["per_seed_time"] == pytest.approx(peer["per_seed_time"], rel=1e-8)
        assert mine["per_seed_worker_s"] == pytest.approx(peer["per_seed_worker_s"], rel=1e-8)
    stored = json.loads(PEERS.read_text())["traces"]["digits"]
    assert row["limit"] == pytest.approx(stored["limit"], rel=1e-8)
    best_peer = min(peers.values(), key=lambda p: p["time_to_target"])
    assert peers[row["best_peer"]] is best_peer or (
        peers[row["best_peer"]]["time_to_target"] == best_peer["time_to_target"]
    )
    best = row["hpctune"][row["best_hpctune"]]["time_to_target"]
    assert row["best_ratio"] == pytest.approx(best / best_peer["time_to_target"])


@pytest.mark.slow
def test_real_quick_study_measures_time_and_worker_seconds_to_target() -> None:
    script = REPO / "benchmarks" / "real_policies.py"
    result = subprocess.run(
        [sys.executable, str(script), "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    (run,) = out["runs"]
    assert run["policy"] == "asha"
    assert run["seed"] == 0
    # 4 trials x 3 steps on 2 slots: one of them reaches 3.0 nats (uniform guessing: 4.57)
    assert run["time_to_target"] is not None
    assert run["best"] <= out["target"] == 3.0
    assert 0 < run["time_to_target"] <= run["study_seconds"]
    # two worker processes, each alive for at most the time to target
    assert 0 < run["worker_s_to_target"] <= 2 * run["time_to_target"] + 1e-6
    assert run["worker_s_to_target"] <= run["study_worker_s"]
    assert run["trials_by_target"] <= run["trials_started"] <= 4
    assert out["summary"]["asha"]["reached"] == 1


def test_median_stopping_equals_ray_s_rule_on_the_peers_orders() -> None:
    """hpctune's median stopping rule (no yield, its default) is Ray Tune's
    ``MedianStoppingRule`` as the peers harness drives it (no pending trials, so Ray never
    yields): the same time to target in every one of these orders."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from policies import peer_order
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    from hpctune.simulator import simulate
    from hpctune.simulator.traces import Trace

    trace = Trace.load(REPO / "benchmarks" / "traces" / "diabetes.h5")
    target = trace.default_target()
    stored = json.loads((REPO / "benchmarks" / "results" / "peers-S25.json").read_text())
    ray = stored["traces"]["diabetes"]["peers"]["ray_msr"]["time_to_target"]
    for seed in range(3):
        order = peer_order(seed, trace.num_configs)
        mine = simulate(trace, "median", {}, slots=25, seed=seed, order=order, target=target)
        assert mine.time_to_target == pytest.approx(ray[seed], rel=1e-6), seed
        yielding = simulate(
            trace, "median", {"yield_slots": True}, slots=25, seed=seed, order=order, target=target
        )
        assert yielding.time_to_target != pytest.approx(ray[seed], rel=1e-6), seed
