"""Reading a ``study.toml``: every section checked and resolved into a :class:`StudySpec`.

:func:`load_spec` reads a ``study.toml`` with :mod:`tomllib` and returns a frozen
:class:`StudySpec` with absolute paths and every default filled in. Every mistake is a
:class:`~hpctune.errors.StudySpecError` whose ``field`` is the dotted name of the bad value
(``study.boundary``, ``search_space.lr.low``, ``policy.eta``) and whose message says what must
hold, what was given and what to do. Loading never writes anything and never imports the
user's code (the CLI calls :meth:`EntryPoint.load` for that). A backend's section
(``[slurm]``) is checked by the backend that owns it (:mod:`hpctune.plugins`).
"""

from __future__ import annotations

import copy
import difflib
import os
import tomllib
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from hpctune.curves.options import parse_curves
from hpctune.errors import StudySpecError
from hpctune.journal.best import BEST_MODES, DEFAULT_KEEP, KEEP_MODES
from hpctune.plugins import backend_sections
from hpctune.policies import OptionError, Policy, StudyContext, make_policy
from hpctune.policies.generators import make_generator
from hpctune.spec.model import ComponentSpec, StudySpec
from hpctune.spec.resources import check_deadline, parse_resources
from hpctune.spec.sections import Section, table_of
from hpctune.spec.study_table import MAX_TRIALS, StudyTable, parse_study_table
from hpctune.stagetree.options import parse_stages
from hpctune.study.seeding import component_seed
from hpctune.study.space import NoGridError, SearchSpace, parse_space

SECTIONS = (
    "study",
    "search_space",
    "generator",
    "policy",
    "resources",
    "curves",
    "stages",
)


def load_spec(
    path: str | Path,
    *,
    directory: str | Path | None = None,
    now: datetime | None = None,
) -> StudySpec:
    """Read and check a ``study.toml``; write nothing.

    Args:
        path: The study.toml.
        directory: Overrides ``[study].directory`` (CLI ``--study-dir``); relative to the
            current directory.
        now: The time for ``{timestamp}`` (default: now).

    Raises:
        StudySpecError: The file is missing, is not valid TOML, or a value is invalid.
    """
    source = Path(os.path.abspath(Path(path).expanduser()))
    if not source.exists():
        raise StudySpecError(source, "", f"the study spec {source} does not exist; check the path")
    if not source.is_file():
        raise StudySpecError(source, "", f"{source} is not a file; give the study.toml's path")
    try:
        data = tomllib.loads(source.read_bytes().decode("utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise StudySpecError(source, "", f"not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise StudySpecError(source, "", f"not UTF-8 text ({exc}); save it as UTF-8") from None
    except OSError as exc:
        raise StudySpecError(source, "", f"cannot read the file: {exc}") from None
    return parse_spec(data, source=source, directory=directory, now=now)


def parse_spec(
    data: Mapping[str, Any],
    *,
    source: Path,
    directory: str | Path | None = None,
    now: datetime | None = None,
) -> StudySpec:
    """Check the parsed TOML ``data`` of the study.toml at ``source``.

    Args:
        data: The parsed TOML document.
        source: The study.toml's path (made absolute); relative paths resolve against its
            folder.
        directory: Overrides ``[study].directory``; relative to the current directory.
        now: The time for ``{timestamp}`` (default: now).

    Raises:
        StudySpecError: A section, key or value is invalid (``field`` names it).
    """
    source = Path(os.path.abspath(source))
    backend_options = _backend_sections(data, source)
    study = Section(source, "study", table_of(data, "study", source, True))
    head = parse_study_table(study, directory, now)
    space = parse_space(table_of(data, "search_space", source, True), path=source)
    generator, num_trials = _generator(data, source, study, head, space)
    policy, policy_object = _policy(data, source, head, space)
    # a policy that makes configurations (PBT) trains a model through a lineage: its final one
    makes = policy_object.traits.makes_configurations
    resources = parse_resources(table_of(data, "resources", source, False), source)
    curves = parse_curves(table_of(data, "curves", source, False), source)
    stages = parse_stages(
        table_of(data, "stages", source, False),
        source,
        policy.name,
        head.entry.code(),
        head.metric,
    )
    check_deadline(source, resources, policy_object.traits, policy.name, stages.enabled)
    if stages.enabled:
        key, problem = policy_object.stage_tree_problem()
        if problem:
            raise StudySpecError(source, f"policy.{key}", problem)
    return StudySpec(
        source=source,
        name=head.name,
        directory=head.directory,
        entry=head.entry,
        metric=head.metric,
        mode=head.mode,
        max_steps=head.max_steps,
        step_unit=head.step_unit,
        boundary=head.boundary,
        num_trials=num_trials,
        seed=head.seed,
        fail_fast=head.fail_fast,
        max_retries=head.max_retries,
        metric_bounds=head.metric_bounds,
        random_level=head.random_level,
        report_timeout=head.report_timeout,
        space=space,
        generator=generator,
        policy=policy,
        resources=resources,
        backend_options=backend_options,
        curves=curves,
        stages=stages,
        share_with_group=head.share_with_group,
        objectives=head.objectives,
        best=study.choice("best", "last" if makes else "peak", BEST_MODES),
        keep_checkpoints=study.choice("keep_checkpoints", DEFAULT_KEEP, KEEP_MODES),
    )


def _backend_sections(data: Mapping[str, Any], source: Path) -> dict[str, dict[str, Any]]:
    """Refuse unknown sections; return each backend section checked by its backend
    (``{"slurm": {...}}``, the backend's JSON form)."""
    owners = backend_sections()
    known = (*SECTIONS, *owners)
    out: dict[str, dict[str, Any]] = {}
    for key in data:
        if key in owners:
            out[key] = owners[key].parse_options(table_of(data, key, source, False), source)
        elif key not in SECTIONS:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean [{close[0]}]? " if close else ""
            raise StudySpecError(
                source, key, f"unknown section; {hint}valid sections: {', '.join(known)}"
            )
    return out


def _generator(
    data: Mapping[str, Any], source: Path, study: Section, head: StudyTable, space: SearchSpace
) -> tuple[ComponentSpec, int]:
    """``[generator]`` checked by building it, and ``num_trials`` (default: its grid's size)."""
    generator = _component(data, "generator", "random", source)
    try:
        gen = make_generator(
            generator.name, generator.options, space, component_seed(head.seed, "generator")
        )
    except OptionError as exc:
        raise StudySpecError(source, f"generator.{exc.key}", exc.message) from None
    except NoGridError as exc:
        raise StudySpecError(source, f"search_space.{exc.param}", exc.message) from None
    problem = gen.objectives_problem(len(head.objectives))
    if problem:
        raise StudySpecError(source, "generator.name", problem)
    size = gen.size()
    if "num_trials" not in study.table and size is None:
        raise study.error(
            "num_trials",
            f"`study.num_trials` is required with the {generator.name!r} generator: how many "
            "trials to create, e.g. num_trials = 32",
        )
    num_trials = study.integer(
        "num_trials", size, low=1, high=size, high_text=f"the grid size ({size})", limit=MAX_TRIALS
    )
    return generator, num_trials


def _policy(
    data: Mapping[str, Any], source: Path, head: StudyTable, space: SearchSpace
) -> tuple[ComponentSpec, Policy]:
    """``[policy]`` checked by building it for the study."""
    policy = _component(data, "policy", "default", source)
    try:
        context = StudyContext(max_steps=head.max_steps, mode=head.mode, boundary=head.boundary)
        built = make_policy(policy.name, policy.options, context)
        built.check_space(space)
    except OptionError as exc:
        raise StudySpecError(source, f"policy.{exc.key}", exc.message) from None
    except ValueError as exc:
        raise StudySpecError(source, "policy", str(exc)) from None
    return policy, built


def _component(data: Mapping[str, Any], key: str, default: str, path: Path) -> ComponentSpec:
    table = table_of(data, key, path, False)
    name = table.get("name", default)
    if not isinstance(name, str):
        raise StudySpecError(
            path, f"{key}.name", f"`{key}.name` must be a string, but got {name!r}"
        )
    options = {k: copy.deepcopy(v) for k, v in table.items() if k != "name"}
    return ComponentSpec(name, options)
