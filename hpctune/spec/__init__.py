"""The study spec: what a ``study.toml`` says, checked and resolved (:func:`load_spec`).

:mod:`.model` holds the frozen :class:`StudySpec` and its JSON form (what the journal keeps),
:mod:`.parse` reads a study.toml into it, section by section (:mod:`.study_table`,
:mod:`.resources`; ``[curves]`` and ``[stages]`` by their packages, a backend's own section by
its backend), :mod:`.entry_point` finds and loads the training function.
"""

from __future__ import annotations

from hpctune.spec.entry_point import EntryPoint
from hpctune.spec.model import ComponentSpec, ResourcesSpec, StudySpec, study_context
from hpctune.spec.parse import load_spec, parse_spec
from hpctune.spec.resources import BILLING_FROM_PARTITION, with_deadline

__all__ = [
    "BILLING_FROM_PARTITION",
    "ComponentSpec",
    "EntryPoint",
    "ResourcesSpec",
    "StudySpec",
    "load_spec",
    "parse_spec",
    "study_context",
    "with_deadline",
]
