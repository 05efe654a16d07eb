"""`hpctune status` of a big study lists its last trials, says how many it left out, and
`--all` lists every one (counts and the best trial always cover all)."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from benchmarks.scale import ASHA, build_history
from hpctune.cli import STATUS_ROWS, cli


def _listed(output: str) -> list[int]:
    """The trial ids of the table's rows."""
    return [int(m.group(1)) for m in re.finditer(r"^(\d+)\s+(completed|terminated)", output, re.M)]


def test_status_lists_the_last_trials_and_all_with_all(tmp_path: Path) -> None:
    trials = STATUS_ROWS + 7
    root = build_history(tmp_path, trials, 3, ASHA, 2, 0)
    runner = CliRunner()
    short = runner.invoke(cli, ["status", str(root)])
    assert short.exit_code == 0, short.output
    assert _listed(short.output) == list(range(7, trials))
    assert f"(7 earlier trials not shown: `hpctune status {root} --all`" in short.output
    assert f"trials {trials}/{trials} done" in short.output
    every = runner.invoke(cli, ["status", str(root), "--all"])
    assert _listed(every.output) == list(range(trials))
    assert "not shown" not in every.output
    few = runner.invoke(cli, ["status", str(root), "--limit", "3"])
    assert _listed(few.output) == list(range(trials - 3, trials))
    assert "(54 earlier trials not shown" in few.output
    bad = runner.invoke(cli, ["status", str(root), "--limit", "0"])
    assert bad.exit_code == 2
    assert "--limit" in bad.output
