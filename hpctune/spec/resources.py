"""The ``[resources]`` section: how many workers of which size, and a deadline to plan for."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hpctune.errors import PlanningError, StudySpecError
from hpctune.policies import PolicyTraits, make_policy, policy_names
from hpctune.spec.model import ResourcesSpec, StudySpec, study_context
from hpctune.spec.sections import Section
from hpctune.study.formatting import parse_duration

RESOURCE_COUNTS = ("slots", "cpus_per_worker", "gpus_per_worker")  # the integer keys
RESOURCE_KEYS = (
    *RESOURCE_COUNTS,
    "deadline",
    "profile",
    "price",
    "billing_weight",
    "max_devices",
    "node_devices",
)
# [resources] keys that only a study with a deadline reads, and what they do
ELASTIC_ONLY = {
    "price": "prices the elastic plan",
    "billing_weight": "prices the elastic plan",
}
BILLING_FROM_PARTITION = "partition"  # [resources] billing_weight: read it from the backend
# Upper bounds of counts (a typo like 1e23 or 2**63-1 is refused, not run).
MAX_SLOTS = 10_000
MAX_CPUS = 4096
MAX_GPUS = 64


def parse_resources(table: Mapping[str, Any], source: Path) -> ResourcesSpec:
    """Check the ``[resources]`` table (a deadline is checked against the policy by
    :func:`check_deadline`).

    Raises:
        StudySpecError: Naming ``resources.<key>``.
    """
    res = Section(source, "resources", table)
    res.check_keys(RESOURCE_KEYS)
    resources = ResourcesSpec(
        slots=res.integer("slots", ResourcesSpec.slots, low=0, limit=MAX_SLOTS),
        cpus_per_worker=res.integer(
            "cpus_per_worker", ResourcesSpec.cpus_per_worker, low=1, limit=MAX_CPUS
        ),
        gpus_per_worker=res.integer(
            "gpus_per_worker", ResourcesSpec.gpus_per_worker, low=0, limit=MAX_GPUS
        ),
        deadline=_deadline(res),
        profile=_profile_path(res, source),
        price=res.positive("price", "a number > 0 (money per billed hour)"),
        billing_weight=_billing_weight(res),
        max_devices=res.integer("max_devices", ResourcesSpec.max_devices, low=1, limit=MAX_GPUS),
        node_devices=(
            res.integer("node_devices", 1, low=1, limit=MAX_GPUS)
            if "node_devices" in res.table
            else None
        ),
    )
    for key, what in ELASTIC_ONLY.items():
        if resources.deadline is None and key in res.table:
            raise StudySpecError(
                source,
                f"resources.{key}",
                f"`resources.{key}` {what} of a study with a deadline; set "
                f"resources.deadline, or remove resources.{key}",
            )
    return resources


def with_deadline(spec: StudySpec, text: str | float) -> StudySpec:
    """``spec`` with ``[resources] deadline`` set to ``text`` (``hpctune launch --deadline``;
    seconds: ``resume --deadline``), checked as in the file.

    Raises:
        StudySpecError: ``text`` is not a duration, or the spec cannot follow a deadline.
    """
    res = Section(spec.source, "resources", {"deadline": text})
    resources = dataclasses.replace(spec.resources, deadline=_deadline(res))
    traits = make_policy(spec.policy.name, spec.policy.options, study_context(spec)).traits
    check_deadline(spec.source, resources, traits, spec.policy.name, spec.stages.enabled)
    return dataclasses.replace(spec, resources=resources)


def _deadline(res: Section) -> float | None:
    """``[resources] deadline``: a duration (``"2h"``, ``"1h30m"``, ``"90m"``) or seconds."""
    value = res.get("deadline", None, "")
    if value is None:
        return None
    rule = 'a duration from the study\'s start such as "2h", "1h30m", "90m", "45s", or seconds'
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise res.must("deadline", rule, value)
    try:
        seconds = parse_duration(str(value), "`resources.deadline`")
    except PlanningError:
        raise res.must("deadline", rule, value) from None
    if not math.isfinite(seconds):
        raise res.must("deadline", rule, value)
    return seconds


def _billing_weight(res: Section) -> float | str | None:
    """``[resources] billing_weight``: a number > 0, or ``"partition"`` (read from Slurm)."""
    rule = f'a number > 0 (billed units per device-hour) or "{BILLING_FROM_PARTITION}"'
    if res.get("billing_weight", None, "") == BILLING_FROM_PARTITION:
        return BILLING_FROM_PARTITION
    return res.positive("billing_weight", rule)


def _profile_path(res: Section, source: Path) -> Path | None:
    """``[resources] profile``: the planner's profile, relative to the study.toml's folder."""
    if "profile" not in res.table:
        return None
    text = res.string("profile")
    return Path(os.path.abspath(source.parent / Path(text).expanduser()))


def check_deadline(
    source: Path, resources: ResourcesSpec, traits: PolicyTraits, policy: str, stages: bool
) -> None:
    """Refuse a deadline the controller cannot follow (its policy, stage trees, worker size);
    ``traits`` and ``policy``: the study's policy's traits and name.

    Raises:
        StudySpecError: Naming the field to change.
    """
    if resources.deadline is None:
        return
    if not traits.rungs_known:
        names = policy_names(rungs_known=True)
        planned = [f'"{n}"' for n in names]
        raise StudySpecError(
            source,
            "policy.name",
            f"`resources.deadline` needs a policy whose rungs are known in advance "
            f"({', '.join(names)}), but [policy] name is {policy!r}; set "
            f"[policy] name = {planned[0]} (or {', '.join(planned[1:])}), "
            "or remove resources.deadline",
        )
    if stages:
        raise StudySpecError(
            source,
            "resources.deadline",
            "`resources.deadline` is not followed over a stage tree yet; remove it or set "
            "stages.enabled = false",
        )
    if resources.slots < 1:
        raise StudySpecError(
            source,
            "resources.slots",
            "with `resources.deadline`, `resources.slots` is the most devices the plan may hold "
            "at once and must be >= 1",
        )
    _check_devices(source, resources)


def _check_devices(source: Path, resources: ResourcesSpec) -> None:
    """A deadline counts devices of one GPU (or CPU), whole nodes past a node's devices."""
    devices = resources.gpus_per_worker or resources.cpus_per_worker
    if devices != 1:
        key = "gpus_per_worker" if resources.gpus_per_worker else "cpus_per_worker"
        raise StudySpecError(
            source,
            f"resources.{key}",
            f"with `resources.deadline` a worker's size is counted in devices of one GPU (or "
            f"one CPU when gpus_per_worker = 0), but `resources.{key}` is {devices}; set "
            f"resources.{key} = 1 and give trials more devices with resources.max_devices = "
            f"{devices}, or remove resources.deadline",
        )
    node = resources.node_devices
    if node is not None and resources.max_devices > node and resources.max_devices % node:
        raise StudySpecError(
            source,
            "resources.max_devices",
            f"a trial of more devices than a node has (`resources.node_devices` = {node}) "
            f"takes whole nodes, but `resources.max_devices` is {resources.max_devices}; set "
            f"it to at most {node} or to a multiple of it",
        )
