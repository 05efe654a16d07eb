"""Property test through the CLI: every malformed study.toml makes `hpctune launch` exit with
code 2 and a message naming the field, and writes nothing."""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from pathlib import Path

from hypothesis import given, settings

from hpctune.cli import main
from tests.spec.test_spec import Mutation, _snapshot, _write, base_doc, mutations


def _launch(folder: Path, path: Path) -> tuple[int, str]:
    err = io.StringIO()
    cwd = os.getcwd()
    try:
        os.chdir(folder)
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(["launch", str(path), "--local"])
    finally:
        os.chdir(cwd)
    return code, err.getvalue()


@settings(max_examples=150, deadline=None)
@given(mutation=mutations())
def test_malformed_specs_exit_2_name_the_field_and_write_nothing(mutation: Mutation) -> None:
    doc, fields = mutation
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = _write(folder, doc)
        before = _snapshot(folder)
        code, err = _launch(folder, path)
        assert code == 2, err
        assert str(path) in err
        assert any(f"field '{field}'" in err for field in fields), (sorted(fields), err)
        assert _snapshot(folder) == before


def test_a_valid_spec_passes_the_same_check(tmp_path: Path) -> None:
    """The property above is not vacuous: the unmutated spec validates (dry run, exit 0)."""
    path = _write(tmp_path, base_doc())
    before = _snapshot(tmp_path)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        code = main(["launch", str(path), "--dry-run"])
    assert code == 0
    assert "is valid" in out.getvalue()
    assert _snapshot(tmp_path) == before
