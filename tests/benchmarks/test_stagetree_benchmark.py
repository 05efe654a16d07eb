"""Smoke test of benchmarks/stagetree.py: it runs and its figures are consistent."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "stagetree.py"


def test_quick_benchmark_reports_sharing_and_makespans() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert [s["space"] for s in out["spaces"]] == ["lr-batch-size", "lr-sequences"]
    for space in out["spaces"]:
        assert space["total_steps"] == space["trials"] * space["max_steps"]
        assert space["unique_steps"] < space["total_steps"]
        assert math.isclose(space["merge_rate"], space["total_steps"] / space["unique_steps"])
        figures = space["workers"]["2"]
        spans = figures["makespan_s"]
        assert set(spans) == {
            "critical-path",
            "critical-path-unbatched",
            "bfs",
            "most-children",
            "trial-based",
        }
        for value in spans.values():
            assert math.isfinite(value)
            assert value > 0
        # batching a path never loads more often than running its stages one by one
        loads = figures["loads"]
        assert loads["critical-path"] < loads["critical-path-unbatched"] == loads["bfs"]
        assert spans["critical-path"] < spans["trial-based"]
        assert figures["gpu_saving"] > 1
        assert math.isclose(
            figures["ratio_to_critical_path"]["bfs"], spans["bfs"] / spans["critical-path"]
        )
    for tuners in out["sha"]:
        for tuner in ("sha", "asha"):
            figures = tuners[tuner]["2"]
            spans = figures["makespan_s"]
            assert set(spans) == {"critical-path", "bfs", "most-children", "trial-based"}
            assert set(figures["utilisation"]) == set(spans) - {"trial-based"}
            assert all(0 < u <= 1 for u in figures["utilisation"].values())
            assert figures["gpu_saving"] > 1
            assert spans["critical-path"] < spans["trial-based"]


def test_the_real_training_benchmark_writes_valid_studies(tmp_path: Path) -> None:
    """benchmarks/stagetree_run.py's study variants load with the policy, stages and space."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import stagetree_run
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    from hpctune.spec import load_spec

    for stages in (True, False):
        spec = load_spec(stagetree_run.pbt_variant(tmp_path, stages, 2, 1024))
        assert (spec.policy.name, spec.stages.enabled, spec.num_trials) == ("pbt", stages, 8)
        assert spec.policy.options["population_size"] == 8
        assert spec.space.params["hidden"].value == 1024  # type: ignore[attr-defined]
        median = load_spec(stagetree_run.write_variant(tmp_path, stages, 3, None, "median"))
        assert (median.policy.name, median.stages.enabled, median.resources.slots) == (
            "median",
            stages,
            3,
        )
