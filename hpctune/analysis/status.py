"""What ``hpctune status`` shows: a study's journal, its live controller and what each backend
it ran on says (jobs in the queue, failing submissions), as text and as the JSON of
``docs/cli.md``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hpctune.analysis.summary import (
    best_text,
    notices,
    pareto_text,
    policy_lines,
    status_json,
    study_line,
    trials_table,
    usage_line,
)
from hpctune.backends.base import Backend
from hpctune.elastic.status import format_plan_status, study_plan_status
from hpctune.journal.state import StudyRecord
from hpctune.plugins import backend, backend_names
from hpctune.study.states import StudyState
from hpctune.wire.layout import StudyPaths
from hpctune.wire.lease import controller_alive


@dataclass(frozen=True)
class StudyStatus:
    """A study as ``hpctune status`` shows it.

    Attributes:
        paths: The study directory.
        record: The journal's fold as of its last commit.
        controller: The live controller that holds the study's lease (``pid``, ``host``,
            ``epoch``, ``job``, ...), or ``None``.
        backends: By name, each backend that owns a study.toml section, and what it says of
            the study (``None``: nothing, e.g. no Slurm here or a local study).
    """

    paths: StudyPaths
    record: StudyRecord
    controller: Mapping[str, Any] | None
    backends: Mapping[str, tuple[Backend, dict[str, Any] | None]]

    @classmethod
    def read(cls, paths: StudyPaths, record: StudyRecord) -> StudyStatus:
        """Ask the lease and every backend about the study whose journal gave ``record``."""
        controller = controller_alive(paths)
        backends = {}
        for name in backend_names():
            found = backend(name)
            if found.section:
                backends[name] = (found, found.status(paths, record, controller is not None))
        return cls(paths, record, controller, backends)

    def allocated_seconds(self) -> float | None:
        """Seconds the worker jobs held their allocation as a backend accounts them (sacct),
        or ``None`` when no backend can say."""
        for name in backend_names():
            seconds = backend(name).allocated_seconds(self.record)
            if seconds is not None:
                return float(seconds)
        return None

    def to_dict(self, *, sacct: bool = False) -> dict[str, Any]:
        """``status --json``: :func:`~hpctune.analysis.summary.status_json` with the
        controller, each backend's status under its name (``slurm``) and the changes of its
        settings (``resume --set``) under ``<section>_changes`` and, for all sections,
        ``settings_changes``; ``sacct``: ``accounting.sacct_allocated_s`` too."""
        data = status_json(self.record, str(self.paths.root))
        study = data["study"]
        study["controller"] = self.controller
        for name, (found, info) in self.backends.items():
            study[name] = info
            study[f"{found.section}_changes"] = [
                {k: v for k, v in change.items() if k != "section"}
                for change in self.record.settings_changes
                if change["section"] == found.section
            ]
        study["settings_changes"] = self.record.settings_changes
        if sacct:
            data["accounting"]["sacct_allocated_s"] = self.allocated_seconds()
        return data

    def lines(self, *, limit: int | None, sacct: bool = False) -> list[str]:
        """``status`` as text: the study, its usage, controller and backends, notices and the
        elastic plan, the last ``limit`` trials (``None``: all) and the best trial."""
        record, root = self.record, self.paths.root
        lines = [f"study {record.spec.get('name')} in {root}", study_line(record)]
        lines.append(usage_line(record))
        if sacct:
            seconds = self.allocated_seconds()
            shown = "sacct not available" if seconds is None else f"{seconds:.0f} s"
            lines.append(f"sacct: worker jobs held their allocation {shown}")
        lines += self._controller_lines()
        if record.reason:
            lines.append(f"reason: {record.reason}")
        lines += [*policy_lines(record), *notices(record), *self._plan_lines(), ""]
        lines.append(trials_table(record, limit=limit))
        hidden = 0 if limit is None else len(record.trials) - limit
        if hidden > 0:
            lines.append(
                f"({hidden} earlier trials not shown: `hpctune status {root} --all`, or "
                "`--json`, or `hpctune export`)"
            )
        lines += ["", best_text(record, root)]
        front = pareto_text(record)
        return [*lines, front] if front else lines

    def _controller_lines(self) -> list[str]:
        """The live controller, or that none runs; then what the backends say."""
        lines = []
        controller = self.controller
        said = [(found, info) for found, info in self.backends.values() if info is not None]
        if controller is not None:
            job = f"Slurm job {controller['job']}, " if controller.get("job") else ""
            lines.append(
                f"controller: {job}pid {controller.get('pid')} on {controller.get('host')} "
                f"(epoch {controller.get('epoch')})"
            )
        elif any(info.get("controller_job") for _, info in said):
            pass  # the backend says where the controller job is
        elif self.record.state in (StudyState.RUNNING, StudyState.STOPPING):
            lines.append(
                f"controller: not running (resume with `hpctune resume {self.paths.root}`)"
            )
        for found, info in said:
            lines += found.status_lines(info, str(self.paths.root))
        return lines

    def _plan_lines(self) -> list[str]:
        """The elastic plan a study with a deadline follows (none without one)."""
        if self.record.elastic_plan is None:
            return []

        plan = study_plan_status(self.record)
        return [] if plan is None else format_plan_status(plan)


__all__ = ["StudyStatus"]
