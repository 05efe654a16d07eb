"""Exports of a study to the formats other tools read, chosen by name from one registry.

``hpctune export --format NAME`` and :func:`export_study` look the name up here: hpctune's own
formats (:data:`BUILTIN_FORMATS`: CSV, HDF5, Optuna, TensorBoard, MLflow; each writer's module
is imported only when it is used), another package's :class:`ExportFormat` registered under the
entry-point group ``hpctune.exports``::

    [project.entry-points."hpctune.exports"]
    parquet = "hpctune_parquet:PARQUET"

or an importable ``MODULE:ATTRIBUTE`` naming one (:mod:`hpctune.plugins`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hpctune.errors import UsageError

if TYPE_CHECKING:
    from hpctune.journal.reader import StudyReader

KIND = "export format"  # the plug-in kind (entry-point group hpctune.exports)
# (hpctune.plugins is imported where a name is looked up: reading entry points costs start-up
# time that the commands not exporting should not pay)


@dataclass(frozen=True)
class ExportFormat:
    """A way to write a study for another tool (a plug-in: see the module's docstring).

    Attributes:
        suffix: The default output's suffix: ``STUDY_DIR/export/<study name>.<suffix>``.
        description: What is written, in a few words (``hpctune export --help``).
        write: Writes the study to the path (a file or a folder; under a temporary name, then
            renamed, so that nothing half-written is left) and returns the lines that say what
            was written and how to open it. Raises :class:`~hpctune.errors.UsageError` for a
            missing package (with the pip command) or an output it will not overwrite.
    """

    suffix: str
    description: str
    write: Callable[[StudyReader, Path], list[str]]


def _write_csv(study: StudyReader, out: Path) -> list[str]:
    from hpctune.export.csv_files import write_csv

    return [f"wrote {path}" for path in write_csv(study, out)]


def _write_hdf5(study: StudyReader, out: Path) -> list[str]:
    from hpctune.export.hdf5 import write_hdf5

    return [
        f"wrote {write_hdf5(study, out)}",
        f'read it with hpctune.open_study("{out}") or h5py (docs/journal.md)',
    ]


def _write_optuna(study: StudyReader, out: Path) -> list[str]:
    try:
        import optuna  # noqa: F401
    except ImportError:
        raise UsageError(
            "--format optuna needs optuna, which is not installed: pip install 'hpctune[report]'"
        ) from None
    from hpctune.export.optuna_journal import write_optuna_journal

    if out.exists():
        raise UsageError(f"{out} exists already; remove it or give another --out")
    return [f"wrote {write_optuna_journal(study, out)}", f"open it with: optuna-dashboard {out}"]


def _write_tensorboard(study: StudyReader, out: Path) -> list[str]:
    from hpctune.export.tensorboard import write_tensorboard

    folders = write_tensorboard(study, out)
    return [
        f"wrote {len(folders)} trial folders under {out}",
        f"open them with: tensorboard --logdir {out}",
    ]


def _write_mlflow(study: StudyReader, out: Path) -> list[str]:
    from hpctune.export.mlflow_store import write_mlflow

    return [
        f"wrote {write_mlflow(study, out)}",
        "open it with: MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri "
        f"{out.resolve().as_uri()}",
    ]


#: hpctune's own formats, by name (``--format``).
BUILTIN_FORMATS: Mapping[str, ExportFormat] = {
    "csv": ExportFormat("csv", "trials.csv, metrics.csv", _write_csv),
    "hdf5": ExportFormat("h5", "one file", _write_hdf5),
    "optuna": ExportFormat("optuna.log", "a journal file", _write_optuna),
    "tensorboard": ExportFormat("tb", "event files per trial", _write_tensorboard),
    "mlflow": ExportFormat("mlruns", "a file store", _write_mlflow),
}


def format_names() -> list[str]:
    """Every export format: hpctune's own, then other packages' (entry points)."""
    from hpctune.plugins import registered

    return registered(KIND, BUILTIN_FORMATS)


def find_format(name: str) -> ExportFormat:
    """The export format ``name``: hpctune's own, an entry point, or ``MODULE:ATTRIBUTE``.

    Raises:
        PluginError: Unknown (with the known names), it fails to load, or it is not an
            :class:`ExportFormat`.
    """
    from hpctune.plugins import PluginError, find

    found = find(KIND, name, BUILTIN_FORMATS)
    if not isinstance(found, ExportFormat):
        raise PluginError(
            f"the {KIND} {name!r} is a {type(found).__name__}, not an "
            "hpctune.export.ExportFormat(suffix, description, write)"
        )
    return found


def default_path(study: StudyReader, fmt: ExportFormat) -> Path:
    """Where an export goes without ``--out``: ``STUDY_DIR/export/<study name>.<suffix>``."""
    name = str(study.spec.get("name", "study"))
    return Path(study.directory) / "export" / f"{name}.{fmt.suffix}"


def export_study(study: StudyReader, name: str, out: Path | None = None) -> list[str]:
    """Write ``study`` in the format ``name`` to ``out`` (default :func:`default_path`);
    return the lines that say what was written and how to open it.

    Raises:
        PluginError: The format is unknown or fails to load.
        UsageError: The format needs a package that is missing, or will not overwrite ``out``.
    """
    fmt = find_format(name)
    target = Path(out) if out is not None else default_path(study, fmt)
    target.parent.mkdir(parents=True, exist_ok=True)
    return fmt.write(study, target)


__all__ = [
    "BUILTIN_FORMATS",
    "ExportFormat",
    "default_path",
    "export_study",
    "find_format",
    "format_names",
]
