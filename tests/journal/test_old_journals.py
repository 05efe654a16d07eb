"""Journals written by earlier hpctune versions (tests/assets/journals/README.md) are read as
they were written, or refused with what to do: every path that reads an older journal runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hpctune.api import open_study
from hpctune.errors import JournalError
from hpctune.slurm.options import slurm_spec
from hpctune.spec import StudySpec
from hpctune.study.states import StudyState, TrialStatus

ASSETS = Path(__file__).resolve().parents[1] / "assets" / "journals"


def _copy(name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copytree(ASSETS / name, target, symlinks=True)
    return target


@pytest.mark.parametrize("name", ["format2-first", "slurm-changed"])
def test_an_older_journal_reads_as_it_was_written(name: str, tmp_path: Path) -> None:
    study = open_study(_copy(name, tmp_path))
    assert study.record.state is StudyState.FINISHED
    assert [t.status for t in study.trials] == [TrialStatus.COMPLETED] * 3
    assert [t.params["x"] for t in study.trials] == [0.2, 0.5, 0.9]
    steps, values = study.curve(2)
    assert steps.tolist() == [1, 2, 3]
    assert values.tolist() == pytest.approx([0.3, 0.6, 0.9])
    rows = study.metric_rows()
    losses = {int(t): float(v) for t, v in zip(rows["trial"], rows["loss"], strict=True)}
    assert losses == pytest.approx({0: 0.8, 1: 0.5, 2: 0.1})  # a metric besides the study's
    best = study.best_trial()
    assert best is not None
    assert (best.trial_id, best.step) == (2, 3)


def test_keys_a_spec_did_not_have_yet_take_their_defaults(tmp_path: Path) -> None:
    study = open_study(_copy("format2-first", tmp_path))
    assert "keep_checkpoints" not in study.spec  # as written then
    spec = StudySpec.from_dict(study.spec)
    assert (spec.best, spec.keep_checkpoints, spec.objectives) == ("peak", "last", ())
    assert (spec.resources.slots, spec.resources.max_devices) == (2, 1)
    assert spec.backend_options["slurm"]["max_pending"] == 16  # then every spec had [slurm]


def test_a_slurm_changed_record_is_a_settings_change_of_the_slurm_section(tmp_path: Path) -> None:
    study = open_study(_copy("slurm-changed", tmp_path))
    (change,) = study.record.settings_changes
    assert change["section"] == "slurm"
    assert change["changes"]["worker.partition"] == ["cpu", "gpu"]
    assert change["source"] == "--slurm partition=gpu controller.time=30"
    slurm = slurm_spec(StudySpec.from_dict(study.spec))
    assert (slurm.worker.partition, slurm.controller.time_min) == ("gpu", 30)


def test_a_journal_of_format_1_is_refused_with_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(JournalError, match=r"journal format 1, older than this hpctune reads"):
        open_study(_copy("format1", tmp_path))
