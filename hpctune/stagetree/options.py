"""The optional ``[stages]`` section of study.toml: run the study as a stage tree (Hippo).

With ``enabled = true`` every trial of the generator is a request in one search plan, and the
controller gives each free worker a path of stages (shared prefixes trained once) instead of a
trial (:mod:`hpctune.core.stages`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hpctune.errors import StudySpecError, check_table_keys
from hpctune.plugins import PluginError
from hpctune.policies import policy_class, policy_names

STAGES_KEYS = ("enabled", "scheduler", "store", "fingerprint")
SCHEDULERS = ("critical-path", "bfs", "most-children")


def stage_policies() -> list[str]:
    """The registered policies that run over stage trees (the trait ``runs_on_stage_trees``)."""
    return policy_names(runs_on_stage_trees=True)


def _runs_on_stage_trees(policy: str) -> bool:
    """Whether the policy ``policy`` (a registered name or ``MODULE:CLASS``) runs over stage
    trees; ``False`` for one that cannot be found."""
    try:
        return policy_class(policy).traits.runs_on_stage_trees
    except PluginError:
        return False


@dataclass(frozen=True)
class StagesSpec:
    """How a study uses stage trees.

    Attributes:
        enabled: Run the study as a stage tree (shared prefixes trained once); policies
            those with the trait ``runs_on_stage_trees`` (:func:`stage_policies`).
        scheduler: Which ready stages a free worker gets: ``"critical-path"`` (Hippo §4.3: the
            longest path, whole), ``"bfs"`` or ``"most-children"`` (one stage at a time).
        store: A directory shared by studies (absolute), or ``None``: stage checkpoints are
            published there and reused by later studies with the same :attr:`digest`.
        fingerprint: The user's name for the model, data and code version (with ``store``).
        digest: The store's key for this study: a hash of :attr:`fingerprint`, the training
            file's bytes (or module name) and the metric; studies share only with an equal one.
    """

    enabled: bool = False
    scheduler: str = "critical-path"
    store: str | None = None
    fingerprint: str = ""
    digest: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StagesSpec:
        """Inverse of :meth:`to_dict`."""
        return cls(
            enabled=bool(data.get("enabled", False)),
            scheduler=str(data.get("scheduler", "critical-path")),
            store=data.get("store"),
            fingerprint=str(data.get("fingerprint", "")),
            digest=str(data.get("digest", "")),
        )


def share_digest(fingerprint: str, code: bytes, metric: str) -> str:
    """What studies must have in common to share stages: a hash of the fingerprint, the
    training file's bytes (or module name) and the metric."""
    h = hashlib.sha256()
    for part in (fingerprint.encode(), code, metric.encode()):
        h.update(len(part).to_bytes(8, "big") + part)
    return h.hexdigest()[:16]


def parse_stages(
    table: Mapping[str, Any], path: Path, policy: str, code: bytes = b"", metric: str = ""
) -> StagesSpec:
    """Check the ``[stages]`` table (``policy``: the study's policy name; ``code`` and
    ``metric``: what, besides ``fingerprint``, a store shares by).

    Raises:
        StudySpecError: naming ``stages.<key>``, with what must hold and what was given.
    """
    check_table_keys(table, STAGES_KEYS, "stages", path)
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
    if enabled and not _runs_on_stage_trees(policy):
        raise StudySpecError(
            path,
            "stages.enabled",
            f"stage trees run with the policies {', '.join(stage_policies())} (tuners that ask "
            "for trials trained to a step or judge them at known rungs, not ones that decide at "
            "every boundary), not with "
            f'{policy!r}; set [policy] name = "default" or "sha", or stages.enabled = false',
        )
    store = table.get("store")
    fingerprint = table.get("fingerprint", "")
    if store is not None and (not isinstance(store, str) or not store):
        raise StudySpecError(
            path,
            "stages.store",
            f"`stages.store` must be a directory path (shared by the studies that reuse each "
            f'other\'s stages, e.g. "../stage-store"), but got {store!r}',
        )
    if not isinstance(fingerprint, str) or (store is not None and not fingerprint.strip()):
        raise StudySpecError(
            path,
            "stages.fingerprint",
            "`stages.fingerprint` must name the model, data and code version the stored "
            'checkpoints belong to (e.g. "resnet20-cifar10-v2") when `stages.store` is set, '
            f"but got {fingerprint!r}",
        )
    digest = ""
    if store is not None:
        store = str(Path(os.path.abspath(path.parent / Path(store).expanduser())))
        digest = share_digest(fingerprint, code, metric)
    return StagesSpec(
        enabled=enabled, scheduler=scheduler, store=store, fingerprint=fingerprint, digest=digest
    )


__all__ = ["SCHEDULERS", "STAGES_KEYS", "StagesSpec", "parse_stages", "share_digest"]
