"""Smoke test of benchmarks/elastic.py: it runs and prints sane figures (no timing limits)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "elastic.py"


def _rows(*args: str) -> list[dict[str, object]]:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--samples", "4", "--json", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=240,
        cwd=REPO,
    ).stdout
    return json.loads(out)  # type: ignore[no-any-return]


@pytest.mark.slow
def test_the_paper_and_a_trace() -> None:
    paper = _rows("--only", "paper")
    assert [r["deadline_s"] for r in paper] == [1200.0, 1800.0, 2400.0]
    assert all(r["feasible"] for r in paper)
    assert paper[0]["saving"] > 1.5  # type: ignore[operator]
    assert paper[0]["elastic_time_s"] <= 1200.0  # type: ignore[operator]
    assert paper[0]["naive_cost"] > paper[0]["elastic_cost"]  # type: ignore[operator]
    digits = _rows("--only", "digits", "--time-scale", "100")
    assert len(digits) == 3
    for r in digits:
        assert r["elastic_cost"] <= r["static_cost"]  # type: ignore[operator]
        assert r["unit"] == "GPU-hours"
