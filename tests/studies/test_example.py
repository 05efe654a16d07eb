"""The README's example study, as a newcomer runs it, and the documentation's links."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hpctune.api import open_study
from hpctune.study.states import StudyState, TrialStatus
from tests.conftest import DIGITS, REPO, run_hpctune


@pytest.mark.slow
def test_the_digits_example_finishes_with_a_good_model(
    tmp_path: Path, cleanup_studies: list[Path]
) -> None:
    study_dir = tmp_path / "digits"
    cleanup_studies.append(study_dir)
    result = run_hpctune(
        "launch",
        str(DIGITS / "study.toml"),
        "--local",
        "--study-dir",
        str(study_dir),
        timeout=300,
        check=True,
    )
    assert "best configuration:" in result.stdout
    study = open_study(study_dir)
    assert study.record.state is StudyState.FINISHED
    assert len(study.trials) == 16
    for trial in study.trials:
        assert trial.status is TrialStatus.COMPLETED
        assert study.curve(trial.trial_id).steps.tolist() == list(range(1, 21))
    best = study.best_trial()
    assert best is not None
    assert study.best_value(best.trial_id) >= 0.9


def test_relative_links_in_the_docs_point_to_files() -> None:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"
