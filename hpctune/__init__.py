"""hpctune: hyperparameter tuning for Slurm clusters, coordinated only through Slurm and files.

User code needs only :class:`TrialContext` (passed to the training function) and, to analyse a
study, :func:`open_study`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from hpctune.api import Study, launch, load_spec, open_study, resume
    from hpctune.study.states import Decision, StudyState, TrialStatus
    from hpctune.worker.context import ReportResult, TrialContext, TrialStop

_LAZY = {
    "TrialContext": "hpctune.worker.context",
    "TrialStop": "hpctune.worker.context",
    "ReportResult": "hpctune.worker.context",
    "Study": "hpctune.api",
    "open_study": "hpctune.api",
    "launch": "hpctune.api",
    "resume": "hpctune.api",
    "load_spec": "hpctune.api",
    "Decision": "hpctune.study.states",
    "StudyState": "hpctune.study.states",
    "TrialStatus": "hpctune.study.states",
}


def __getattr__(name: str) -> Any:
    """Import the public names on first use (keeps `import hpctune` light in workers)."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'hpctune' has no attribute {name!r}")


__all__ = [
    "Decision",
    "ReportResult",
    "Study",
    "StudyState",
    "TrialContext",
    "TrialStatus",
    "TrialStop",
    "__version__",
    "launch",
    "load_spec",
    "open_study",
    "resume",
]
