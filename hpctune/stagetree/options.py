"""The optional ``[stages]`` section of study.toml: run the study as a stage tree (Hippo).

With ``enabled = true`` every trial of the generator is a request in one search plan, and the
controller gives each free worker a path of stages (shared prefixes trained once) instead of a
trial (:mod:`hpctune.controller._stages`).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hpctune.errors import StudySpecError

STAGES_KEYS = ("enabled", "scheduler")
SCHEDULERS = ("critical-path", "bfs", "most-children")
STAGE_POLICIES = ("default", "sha", "hyperband")  # tuners that run over stage trees today


@dataclass(frozen=True)
class StagesSpec:
    """How a study uses stage trees.

    Attributes:
        enabled: Run the study as a stage tree (shared prefixes trained once).
        scheduler: Which ready stages a free worker gets: ``"critical-path"`` (Hippo §4.3: the
            longest path, whole), ``"bfs"`` or ``"most-children"`` (one stage at a time).
    """

    enabled: bool = False
    scheduler: str = "critical-path"

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StagesSpec:
        """Inverse of :meth:`to_dict`."""
        return cls(
            enabled=bool(data.get("enabled", False)),
            scheduler=str(data.get("scheduler", "critical-path")),
        )


def parse_stages(table: Mapping[str, Any], path: Path, policy: str) -> StagesSpec:
    """Check the ``[stages]`` table (``policy``: the study's policy name).

    Raises:
        StudySpecError: naming ``stages.<key>``, with what must hold and what was given.
    """
    for key in table:
        if key not in STAGES_KEYS:
            close = difflib.get_close_matches(key, STAGES_KEYS, n=1)
            hint = f"did you mean `{close[0]}`? " if close else ""
            raise StudySpecError(
                path,
                f"stages.{key}",
                f"unknown key in [stages]; {hint}valid keys: {', '.join(STAGES_KEYS)}",
            )
    enabled = table.get("enabled", False)
    if not isinstance(enabled, bool):
        raise StudySpecError(
            path, "stages.enabled", f"`stages.enabled` must be true or false, but got {enabled!r}"
        )
    scheduler = table.get("scheduler", "critical-path")
    if scheduler not in SCHEDULERS:
        raise StudySpecError(
            path,
            "stages.scheduler",
            f"`stages.scheduler` must be one of {', '.join(repr(s) for s in SCHEDULERS)}, "
            f"but got {scheduler!r}",
        )
    if enabled and policy not in STAGE_POLICIES:
        raise StudySpecError(
            path,
            "stages.enabled",
            f"stage trees run with the policies {', '.join(STAGE_POLICIES)} (tuners that ask "
            "for trials trained to a step, not ones that decide at every boundary), not with "
            f'{policy!r}; set [policy] name = "default" or "sha", or stages.enabled = false',
        )
    return StagesSpec(enabled=enabled, scheduler=scheduler)


__all__ = ["SCHEDULERS", "STAGES_KEYS", "StagesSpec", "parse_stages"]
