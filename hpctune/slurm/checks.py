"""What Slurm would say to a study's jobs, asked before anything is submitted.

:func:`check_jobs` runs ``sbatch --test-only`` with the controller's and the workers' options
and turns a refusal into an error that names the ``[slurm]`` key to change; a time limit above
the partition's ``MaxTime`` is refused before Slurm is asked.
"""

from __future__ import annotations

from pathlib import Path

from hpctune.errors import StudySpecError
from hpctune.slurm.cluster import (
    Partition,
    find_partition,
    partitions,
    resolve_times,
    sbatch_flags,
    test_only,
)
from hpctune.slurm.controller_job import controller_options
from hpctune.slurm.executor import worker_parameters
from hpctune.slurm.options import JobOptions, slurm_spec
from hpctune.spec import StudySpec


def keys_for(message: str) -> tuple[str, ...]:
    """The ``[slurm]`` keys an sbatch error message points at (empty: no telling)."""
    lowered = message.lower()
    for phrase, keys in _ERROR_KEYS:
        if phrase in lowered:
            return keys
    return ()


def _field_of(section: str, key: str) -> str:
    if key in ("cpus", "gpus") and section == "slurm":
        return f"resources.{key}_per_worker"
    return f"{section}.{key}"


def check_jobs(spec: StudySpec, source: Path | None = None) -> None:
    """Check the controller's and the workers' options against the cluster; submit nothing.

    Raises:
        StudySpecError: Slurm would reject a job, or a time limit exceeds its partition's
            ``MaxTime``; the message has Slurm's own words and names the key to change.
        SubmissionError: Slurm cannot be reached.
    """
    path = source or spec.source
    parts = partitions()
    names = ", ".join(p.name + ("*" if p.default else "") for p in parts) or "see `sinfo`"
    resolved = resolve_times(spec, parts)
    slurm = slurm_spec(spec)
    jobs = (
        (
            "slurm.controller",
            "the controller's batch job",
            slurm.controller,
            controller_flags(slurm_spec(resolved).controller),
        ),
        (
            "slurm",
            "the worker jobs",
            slurm.worker,
            sbatch_flags(worker_parameters(resolved, env={})),
        ),
    )
    for section, what, options, flags in jobs:
        part = find_partition(parts, options.partition)
        _check_time(options, part, section, what, path)
        message = test_only(flags)
        if message is None:
            continue
        keys = keys_for(message)
        field = _field_of(section, keys[0]) if len(keys) == 1 else section
        change = (
            " or ".join(f"`{_field_of(section, k)}`" for k in keys) if keys else f"[{section}]"
        )
        raise StudySpecError(
            path,
            field,
            f"Slurm rejects {what} (sbatch --test-only): {message}; change {change} "
            f"(partitions: {names})",
        )


def _check_time(
    options: JobOptions, part: Partition | None, section: str, what: str, path: Path
) -> None:
    """Refuse a time limit above the partition's (the job would pend forever)."""
    if part is None or part.max_time_min is None or options.time_min is None:
        return
    limit = part.max_time_min
    if options.time_min > limit:
        raise StudySpecError(
            path,
            f"{section}.time",
            f"{options.time_min} minutes exceeds the MaxTime of partition {part.name!r} "
            f"({limit} minutes, `scontrol show partition {part.name}`): {what} would wait "
            f"forever; set `time` in [{section}] to at most {limit} minutes, or leave it out "
            "to get the partition's limit",
        )


#: sbatch's error text -> the study.toml keys that cause it (first match wins).
_ERROR_KEYS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("account", ("account",)),
    ("qos", ("qos",)),
    ("partition", ("partition",)),
    ("time limit", ("time",)),
    ("feature", ("constraint",)),
    ("generic resource", ("gpus",)),
    ("gres", ("gpus",)),
    ("memory", ("mem",)),
    ("node configuration", ("cpus", "gpus", "mem", "constraint")),
    ("cpu count", ("cpus",)),
)


def controller_flags(options: JobOptions) -> list[str]:
    """The sbatch options of the controller's batch job (as its script sets them)."""
    return [
        f"--{key}" if value is None else f"--{key}={value}"
        for key, value in controller_options(options)
    ]
