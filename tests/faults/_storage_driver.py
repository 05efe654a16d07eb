"""Run inside a private tmpfs (see ``benchmarks/_tmpfs.py``): studies whose disk fills up.

``python -m tests.faults._storage_driver MOUNT`` prints one JSON object for
``test_storage.py``: (1) a study whose disk is full for a few seconds mid-run, then has room
again; (2) a study whose disk stays full beyond the controller's patience, then is resumed
once there is room. The study directories live in the tmpfs, which vanishes with the
namespace, so everything the test checks is gathered here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._tmpfs import fill, free
from hpctune.api import open_study
from tests.conftest import count_reports, start_hpctune, wait_for, write_study

FAULTY = Path(__file__).with_name("faulty.py")
MAX_STEPS = 8


def _hpctune(*args: str, patience: float) -> subprocess.Popen[str]:
    return start_hpctune(*args, env={"HPCTUNE_STORAGE_PATIENCE": str(patience)})


def _summary(study_dir: Path) -> dict[str, Any]:
    study = open_study(study_dir)
    return {
        "state": study.record.state.value,
        "trials": [
            {
                "status": t.status.value,
                "retries": t.retries,
                "steps": study.curve(t.trial_id).steps.tolist(),
                "missing_rows": t.missing_rows,
            }
            for t in study.trials
        ],
        "segment_reasons": [s.reason for s in study.record.segments.values()],
        "warnings": [w.code for w in study.record.warnings],
    }


def _study(folder: Path) -> Path:
    return write_study(
        folder,
        train=FAULTY,
        max_steps=MAX_STEPS,
        num_trials=4,
        space={"x": {"type": "float", "low": 0.1, "high": 1.0}, "sleep": 0.3, "checkpoint": True},
    )


def full_for_a_while(mount: Path) -> dict[str, Any]:
    """The disk fills mid-run and has room again 4 s later."""
    spec = _study(mount / "a")
    process = _hpctune("launch", str(spec), "--local", patience=120)
    assert wait_for(lambda: count_reports(mount / "a" / "study") >= 4, 120)
    filler = fill(mount)
    time.sleep(4.0)
    free(filler)
    out, _ = process.communicate(timeout=300)
    return {"code": process.returncode, "out": out, **_summary(mount / "a" / "study")}


def full_for_good(mount: Path) -> dict[str, Any]:
    """The disk stays full: the controller gives up (exit 1); resumed once there is room."""
    spec = _study(mount / "b")
    process = _hpctune("launch", str(spec), "--local", patience=3)
    assert wait_for(lambda: count_reports(mount / "b" / "study") >= 2, 120)
    filler = fill(mount)
    out, _ = process.communicate(timeout=300)
    free(filler)
    resume = _hpctune("resume", str(mount / "b" / "study"), "--local", patience=120)
    resumed_out, _ = resume.communicate(timeout=300)
    return {
        "code": process.returncode,
        "out": out,
        "resume_code": resume.returncode,
        "resume_out": resumed_out,
        **_summary(mount / "b" / "study"),
    }


if __name__ == "__main__":
    root = Path(sys.argv[1])
    os.chdir(root)
    print(json.dumps({"temporary": full_for_a_while(root), "lasting": full_for_good(root)}))
