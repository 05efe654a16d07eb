"""benchmarks/structure.py: it finds an import cycle made by an import inside a function, and
hpctune has none (issue 29's figure, kept)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "structure.py"


def _structure() -> Any:
    spec = importlib.util.spec_from_file_location("structure", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_cycle_through_an_import_inside_a_function_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "knotted"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "low.py").write_text("def f():\n    from knotted import high\n    return high\n")
    (package / "high.py").write_text("from knotted import low\n")
    (package / "alone.py").write_text("import json\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = _structure().cycles("knotted")
    assert found == [["knotted.high", "knotted.low"]]
    figures = _structure().sizes(package)
    assert figures["deferred_imports_outside_cli"] == 1


def test_hpctune_has_no_import_cycle() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--json"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["cycles"] == []
    assert figures["longest_functions"][0][0] > 0
