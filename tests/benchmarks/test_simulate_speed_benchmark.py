"""Smoke test of benchmarks/simulate_speed.py: a line per policy and slot count, decisions
counted from the policy's own calls, a positive rate."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks.simulate_speed import main


def test_quick_run_counts_every_policys_decisions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quick", "--slots", "4", "--policy", "asha", "--policy", "pbt"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["policy"], r["slots"]) for r in lines] == [("asha", 4), ("pbt", 4)]
    for r in lines:
        assert r["decisions"] >= r["trials"] > 0  # every trial was offered at least once
        assert math.isfinite(r["decisions_per_s"])
        assert r["decisions_per_s"] > 0
