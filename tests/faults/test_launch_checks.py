"""Issue 13, item 8 (counts, entry point): what `launch` and `launch --dry-run` refuse.

Before: ``max_steps = 2**63-1`` (or larger) was accepted (``1e23``, a float in TOML, was
refused already), and an entry point naming a value
(``train = 5``) launched a study whose every trial failed, exit 0.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hpctune.cli import main
from tests.conftest import write_study

OK_TRAIN = "def train(ctx):\n    ctx.report(score=1.0)\n"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_steps", 2**63 - 1, "`study.max_steps` must be at most 1000000000"),
        ("max_steps", 10**23, "`study.max_steps` must be at most 1000000000"),
        ("num_trials", 10**7, "`study.num_trials` must be at most 1000000"),
        ("max_retries", 2**40, "`study.max_retries` must be at most 1000"),
        ("report_timeout", 1e12, "`study.report_timeout` must be seconds between 0"),
    ],
)
def test_counts_beyond_their_documented_bounds_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: float, message: str
) -> None:
    spec = write_study(tmp_path, train=OK_TRAIN, space={"x": 1.0}, **{field: value})
    assert main(["launch", str(spec), "--local"]) == 2
    err = capsys.readouterr().err
    assert f"field 'study.{field}'" in err
    assert message in err
    assert not (tmp_path / "study").exists()


@pytest.mark.parametrize("dry_run", [True, False])
def test_an_entry_point_naming_a_value_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], dry_run: bool
) -> None:
    train = "import math\n\ntrain = 5\n\nsteps = [1, 2]\n"
    spec = write_study(tmp_path, train=train, space={"x": 1.0})
    assert main(["launch", str(spec), "--local", *(["--dry-run"] * dry_run)]) == 2
    err = capsys.readouterr().err
    assert "field 'study.entry_point'" in err
    assert "binds 'train' to a int" in err
    assert "def train(ctx):" in err
    assert not (tmp_path / "study").exists()
    # the last binding counts: a value later replaced by a function is fine
    (tmp_path / "train.py").write_text(train + "\ndef train(ctx):\n    ctx.report(score=1.0)\n")
    assert main(["launch", str(spec), "--local", "--dry-run"]) == 0
