"""An export format from another package: ``tests/report/test_report.py`` registers it through the
entry-point group ``hpctune.exports`` (nothing inside ``hpctune/`` names it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hpctune.export import ExportFormat


def _write(study: Any, out: Path) -> list[str]:
    data = {"study": study.spec.get("name"), "trials": [t.trial_id for t in study.trials]}
    out.write_text(json.dumps(data))
    return [f"wrote {out} ({len(data['trials'])} trials)"]


TOY = ExportFormat("toy.json", "the trial ids as JSON", _write)
NOT_A_FORMAT = {"suffix": "toy.json"}
