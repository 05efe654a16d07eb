"""Training replay (§3.9 of the black-box PBT paper): a new study that re-runs a lineage.

``create_replay`` reads a study's journal, extracts the lineage of the chosen trials (the
dependency graph to the roots, topologically sorted) and their hyperparameter schedule, and
creates a study directory whose ``replay`` policy runs exactly those trials, with the same
hyperparameters, seeds and warm starts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpctune.analysis.lineage import replay_plan
from hpctune.controller.launch import create_study
from hpctune.errors import UsageError
from hpctune.journal.reader import open_study
from hpctune.policies import make_policy
from hpctune.study.spec import ComponentSpec, StudySpec, study_context
from hpctune.wire.layout import StudyPaths


def replay_spec(
    study_dir: str | Path, targets: Sequence[int], directory: str | Path | None = None
) -> tuple[StudySpec, list[dict[str, Any]]]:
    """The spec of a replay of ``targets`` (and its plan); the study is not created.

    Raises:
        UsageError: No target, an unknown trial, or an ancestor forked at several steps.
    """
    if not targets:
        raise UsageError("give at least one trial to replay: --trial ID")
    study = open_study(study_dir)
    record = study.record
    plan = replay_plan(record, list(targets))
    spec = StudySpec.from_dict(record.spec)
    name = f"{spec.name}-replay-{'-'.join(str(t) for t in targets)}"
    target = Path(directory) if directory is not None else study.directory.with_name(name)
    policy = ComponentSpec("replay", {"trials": plan})
    make_policy(policy.name, policy.options, study_context(spec)).check_space(spec.space)
    roots = sum(entry["parent"] is None for entry in plan)
    new = dataclasses.replace(
        spec,
        name=name,
        directory=target.resolve(),
        source=StudyPaths.of(study.directory).spec_copy,
        policy=policy,
        num_trials=max(roots, 1),
    )
    return new, plan


def create_replay(
    study_dir: str | Path, targets: Sequence[int], directory: str | Path | None = None
) -> tuple[StudyPaths, list[dict[str, Any]]]:
    """Create the replay study of ``targets``; return its paths and the plan it runs."""
    spec, plan = replay_spec(study_dir, targets, directory)
    return create_study(spec), plan
