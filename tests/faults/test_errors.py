"""A damaged journal and bad paths give one clear error line and exit 2, never a traceback
(issue 13): a truncated ``journal.zarr/zarr.json`` or a deleted chunk from every command that
reads the journal and from ``open_study``; ``--study-dir`` under a file or in /proc; another
user's study."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpctune.api import open_study
from hpctune.cli import main
from hpctune.errors import JournalError
from tests.conftest import WORKLOADS, hpctune_env, run_hpctune, write_study

NOBODY = 65534


def _study(folder: Path) -> Path:
    spec = write_study(
        folder,
        train=WORKLOADS / "behaviours.py",
        num_trials=2,
        max_steps=3,
        space={"x": {"type": "float", "low": 0.0, "high": 1.0}},
        resources={"slots": 1},
        directory=str(folder / "study"),
    )
    run_hpctune("launch", str(spec), "--local", check=True)
    return folder / "study"


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished study, copied by each test that damages it."""
    return _study(tmp_path_factory.mktemp("finished"))


def _copy(study: Path, folder: Path) -> Path:
    target = folder / "study"
    shutil.copytree(study, target, symlinks=True)
    return target


def _commands(study: Path, out: Path) -> list[list[str]]:
    """Every command that reads a study's journal."""
    return [
        ["status", str(study)],
        ["status", str(study), "--json"],
        ["resume", str(study), "--local"],
        ["lineage", str(study)],
        ["stagetree", str(study)],
        ["export-trace", str(study), str(out / "trace.h5")],
        ["fit-curves", str(study), "--trial", "0"],
        ["replay", str(study), "--trial", "0", "--local", "--study-dir", str(out / "replay")],
    ]


def _assert_clean_error(
    args: list[str], capsys: pytest.CaptureFixture[str], *needles: str
) -> None:
    code = main(args)
    captured = capsys.readouterr()
    assert code == 2, (args, captured.out, captured.err)
    assert captured.err.startswith("error: "), (args, captured.err)
    assert "Traceback" not in captured.err + captured.out
    for needle in needles:
        assert needle in captured.err, (args, needle, captured.err)


def test_a_truncated_commit_record_is_a_journal_error(
    finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study = _copy(finished, tmp_path)
    meta = study / "journal.zarr" / "zarr.json"
    meta.write_bytes(meta.read_bytes()[:40])
    for args in _commands(study, tmp_path):
        _assert_clean_error(args, capsys, "zarr.json", str(study), "restore")
    with pytest.raises(JournalError, match=r"zarr\.json cannot be read"):
        open_study(study)


@pytest.mark.parametrize("chunk", ["log/kind/c/0", "log/trial/c/0", "metrics/step/c/0"])
def test_a_deleted_chunk_is_a_journal_error(
    finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], chunk: str
) -> None:
    study = _copy(finished, tmp_path)
    (study / "journal.zarr" / chunk).unlink()
    missing = f"{chunk} is missing"
    for args in (["status", str(study)], ["resume", str(study), "--local"]):
        _assert_clean_error(args, capsys, missing, "restore")
    with pytest.raises(JournalError, match=missing):
        open_study(study)


def test_a_study_directory_under_a_file_or_in_proc_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write_study(
        tmp_path,
        train=WORKLOADS / "behaviours.py",
        num_trials=1,
        max_steps=1,
        space={"x": 1.0},
    )
    (tmp_path / "a-file").write_text("")
    for target in (tmp_path / "a-file" / "study", Path("/proc/hpctune-study")):
        args = ["launch", str(spec), "--local", "--study-dir", str(target)]
        _assert_clean_error(args, capsys, f"cannot create the study directory {target}")
    assert not list(tmp_path.glob(".study.creating-*"))


@pytest.fixture
def open_folder() -> Iterator[Path]:
    """A folder every user may enter (pytest's temporary folders are private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="hpctune-shared-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _as_nobody(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"),
            *(sys.executable, "-m", "hpctune.cli", *args),
        ],
        capture_output=True,
        text=True,
        env=hpctune_env(),
        timeout=120,
        cwd=folder,
    )


def test_another_users_study_gives_a_clean_error(finished: Path, open_folder: Path) -> None:
    study = _copy(finished, open_folder)  # owned by this user (root)
    for readable in (False, True):  # private; readable by all (made by an older version)
        if readable:
            subprocess.run(["chmod", "-R", "go+rX", str(study)], check=True)
        for args in (["status", str(study)], ["stop", str(study)], ["resume", str(study)]):
            result = _as_nobody(open_folder, *args)
            if readable and args[0] == "status":
                assert result.returncode == 0, result.stderr  # reading is allowed
                continue
            assert result.returncode == 2, (readable, args, result.stdout, result.stderr)
            assert "Traceback" not in result.stderr
            assert str(study) in result.stderr
            if readable:
                assert "is owned by root (uid 0), not by you (nobody" in result.stderr
            else:
                assert "is not readable" in result.stderr
    assert not list((study / "inbox").iterdir())
