"""A study as an Optuna journal file (``optuna-dashboard FILE`` opens it), written with
Optuna's own storage API; each hpctune trial is one Optuna trial
(:mod:`hpctune.analysis.optuna_trials`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from hpctune.analysis.optuna_trials import frozen_trials
from hpctune.files import atomic_path

if TYPE_CHECKING:
    from hpctune.journal.reader import StudyReader


def write_optuna_journal(study: StudyReader, out: Path) -> Path:
    """Write an Optuna journal file that ``optuna-dashboard out`` and
    ``optuna.load_study(storage=JournalStorage(JournalFileBackend(out)))`` open.

    Written under a temporary name and renamed, so a failed export leaves nothing.
    """
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    out = Path(out)
    with atomic_path(out) as tmp:
        try:
            storage = JournalStorage(JournalFileBackend(str(tmp)))
            target = optuna.create_study(
                storage=storage,
                study_name=str(study.spec.get("name", "hpctune")),
                direction="maximize" if study.mode == "max" else "minimize",
            )
            target.set_user_attr("hpctune.metric", study.metric)
            target.set_user_attr("hpctune.directory", str(study.directory))
            target.set_user_attr("hpctune.best", str(study.spec.get("best", "peak")))
            target.add_trials(frozen_trials(study))
        finally:
            Path(f"{tmp}.lock").unlink(missing_ok=True)
    return out


__all__ = ["write_optuna_journal"]
