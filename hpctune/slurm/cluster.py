"""What the cluster allows: partitions, a dry run of the jobs hpctune submits, pending reasons.

Used on the login node by ``hpctune launch`` and ``hpctune resume`` (before anything is created
or submitted) and by ``hpctune status``; in the controller job to choose the default time limits.
Every call has a timeout; a cluster that does not answer is reported, never waited on forever.

* :func:`check_jobs` runs ``sbatch --test-only`` with the controller's and the workers' options
  (partition, account, QOS, time, CPUs, GPUs, memory, constraint, extra options) and compares
  each time limit with its partition's ``MaxTime`` (Slurm's default ``EnforcePartLimits=NO``
  accepts a job over the limit, which then pends forever with ``PartitionTimeLimit``). A
  rejection is a :class:`~hpctune.errors.StudySpecError` (exit 2) with Slurm's own message and
  the study.toml key to change.
* :func:`resolve_times` fills the time limits left unset: the controller gets
  ``min(1 day, MaxTime)``, the workers ``min(1 hour, MaxTime)`` of their partition.
* :func:`job_status` gives a job's state and squeue's reason (``Resources``,
  ``PartitionTimeLimit``, ...) with a hint.
"""

from __future__ import annotations

import dataclasses
import logging
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpctune.errors import StudySpecError, SubmissionError
from hpctune.slurm.options import (
    DEFAULT_CONTROLLER_TIME_MIN,
    DEFAULT_WORKER_TIME_MIN,
    JobOptions,
    parse_time,
)
from hpctune.study.spec import StudySpec

logger = logging.getLogger(__name__)

TIMEOUT_S = 60

#: Phrases of sbatch errors that mean Slurm itself could not be reached (not a bad option).
_UNREACHABLE = (
    "unable to contact",
    "socket timed out",
    "connection refused",
    "zero bytes",
    "could not establish a configuration source",  # no slurm.conf and no DNS record of one
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

#: squeue's pending reasons that need a change of the job's settings, with the key to change.
PENDING_HINTS = {
    "PartitionTimeLimit": "time exceeds the partition's MaxTime: lower `time`",
    "PartitionNodeLimit": "more nodes than the partition allows",
    "PartitionDown": "the partition is down: choose another `partition` or wait",
    "PartitionInactive": "the partition is inactive: choose another `partition`",
    "QOSMaxWallDurationPerJobLimit": "time exceeds the QOS limit: lower `time` or change `qos`",
    "AssocMaxWallDurationPerJobLimit": "time exceeds your account's limit: lower `time`",
    "InvalidAccount": "the account is not valid: change `account`",
    "InvalidQOS": "the QOS is not valid: change `qos`",
    "ReqNodeNotAvail": "no node can run it now (reserved or down nodes)",
    "BadConstraints": "no node has the `constraint`/resources asked for",
}


def _run(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(command), capture_output=True, text=True, timeout=TIMEOUT_S)


def _fields(line: str) -> dict[str, str]:
    """``Key=Value`` words of one line of ``scontrol show -o`` output."""
    out: dict[str, str] = {}
    for word in line.split():
        key, sep, value = word.partition("=")
        if sep:
            out[key] = value
    return out


@dataclass(frozen=True)
class Partition:
    """A partition as ``scontrol show partition`` describes it.

    Attributes:
        name: Its name.
        default: True for the cluster's default partition.
        max_time_min: ``MaxTime`` in minutes, ``None`` when unlimited.
        state: ``UP``, ``DOWN``, ``DRAIN`` or ``INACTIVE``.
        billing_weights: ``TRESBillingWeights`` as written (empty: none set).
    """

    name: str
    default: bool
    max_time_min: int | None
    state: str
    billing_weights: str = ""


def parse_partitions(text: str) -> list[Partition]:
    """Parse ``scontrol show partition -o`` (one partition per line)."""
    partitions = []
    for line in text.splitlines():
        fields = _fields(line)
        if "PartitionName" not in fields:
            continue
        max_time = fields.get("MaxTime", "UNLIMITED")
        minutes = None
        if max_time not in ("UNLIMITED", "INFINITE", ""):
            minutes = parse_time(max_time, None, "MaxTime")
        partitions.append(
            Partition(
                name=fields["PartitionName"],
                default=fields.get("Default") == "YES",
                max_time_min=minutes,
                state=fields.get("State", ""),
                billing_weights=fields.get("TRESBillingWeights", ""),
            )
        )
    return partitions


def partitions() -> list[Partition]:
    """The cluster's partitions (empty when scontrol is missing or fails)."""
    try:
        result = _run(["scontrol", "show", "partition", "-o"])
    except (OSError, subprocess.SubprocessError) as exc:
        logger.info("scontrol show partition failed: %s", exc)
        return []
    if result.returncode != 0:
        logger.info("scontrol show partition failed: %s", result.stderr.strip())
        return []
    return parse_partitions(result.stdout)


def find_partition(parts: Sequence[Partition], name: str | None) -> Partition | None:
    """The partition called ``name``, or the default one for ``None``."""
    for part in parts:
        if part.name == name or (name is None and part.default):
            return part
    return None


def default_time(options: JobOptions, default_min: int, partition: Partition | None) -> int:
    """The time limit of a job: its own, else ``default_min`` capped by the partition's."""
    if options.time_min is not None:
        return options.time_min
    if partition is not None and partition.max_time_min is not None:
        return min(default_min, partition.max_time_min)
    return default_min


def resolve_times(spec: StudySpec, parts: Sequence[Partition] | None = None) -> StudySpec:
    """The spec with the unset time limits of the controller and the workers filled in."""
    slurm = spec.slurm
    if slurm.worker.time_min is not None and slurm.controller.time_min is not None:
        return spec
    parts = partitions() if parts is None else parts
    worker = dataclasses.replace(
        slurm.worker,
        time_min=default_time(
            slurm.worker, DEFAULT_WORKER_TIME_MIN, find_partition(parts, slurm.worker.partition)
        ),
    )
    controller = dataclasses.replace(
        slurm.controller,
        time_min=default_time(
            slurm.controller,
            DEFAULT_CONTROLLER_TIME_MIN,
            find_partition(parts, slurm.controller.partition),
        ),
    )
    return dataclasses.replace(
        spec, slurm=dataclasses.replace(slurm, worker=worker, controller=controller)
    )


def sbatch_flags(parameters: Mapping[str, Any]) -> list[str]:
    """The sbatch options of submitit ``SlurmExecutor`` parameters (as submitit writes them)."""
    skip = {"setup", "signal_delay_s", "stderr_to_stdout", "array_parallelism", "srun_args"}
    flat = {k: v for k, v in parameters.items() if k not in skip and k != "additional_parameters"}
    flat.update(parameters.get("additional_parameters") or {})
    flags = []
    for key, value in flat.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        flags.append(flag if value is True else f"{flag}={value}")
    return flags


def controller_flags(options: JobOptions) -> list[str]:
    """The sbatch options of the controller's batch job (as its script sets them)."""
    from hpctune.slurm.controller_job import controller_options

    return [
        f"--{key}" if value is None else f"--{key}={value}"
        for key, value in controller_options(options)
    ]


def test_only(flags: Sequence[str]) -> str | None:
    """Ask ``sbatch --test-only`` whether Slurm would accept a job; ``None`` if so, else
    sbatch's message.

    Raises:
        SubmissionError: sbatch is missing or Slurm cannot be reached.
    """
    command = ["sbatch", "--test-only", "--output=/dev/null", *flags, "--wrap=true"]
    try:
        result = _run(command)
    except (OSError, subprocess.SubprocessError) as exc:
        raise SubmissionError(f"cannot ask Slurm (sbatch --test-only): {exc}") from exc
    if result.returncode == 0:
        return None
    message = " ".join(result.stderr.split()) or f"sbatch exited {result.returncode}"
    if any(phrase in message.lower() for phrase in _UNREACHABLE):
        raise SubmissionError(f"cannot reach Slurm to check the [slurm] options: {message}")
    return message


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
    from hpctune.slurm.executor import worker_parameters

    path = source or spec.source
    parts = partitions()
    names = ", ".join(p.name + ("*" if p.default else "") for p in parts) or "see `sinfo`"
    resolved = resolve_times(spec, parts)
    jobs = (
        (
            "slurm.controller",
            "the controller's batch job",
            spec.slurm.controller,
            controller_flags(resolved.slurm.controller),
        ),
        (
            "slurm",
            "the worker jobs",
            spec.slurm.worker,
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


@dataclass(frozen=True)
class JobStatus:
    """A job as squeue shows it.

    Attributes:
        job_id: The job.
        state: ``PENDING``, ``RUNNING``, ...
        reason: squeue's reason (``Resources``, ``Priority``, ``PartitionTimeLimit``, ...).
    """

    job_id: str
    state: str
    reason: str

    @property
    def hint(self) -> str:
        """What the reason means for the user ("" for the ordinary waits)."""
        return PENDING_HINTS.get(self.reason, "")


def job_status(job_id: str) -> JobStatus | None:
    """squeue's state and reason of a job, ``None`` when it is not in the queue (or no squeue)."""
    try:
        result = _run(["squeue", "-h", "-j", job_id, "-o", "%T|%r"])
    except (OSError, subprocess.SubprocessError):
        return None
    line = result.stdout.strip().splitlines()
    if result.returncode != 0 or not line:
        return None
    state, _, reason = line[0].partition("|")
    return JobStatus(job_id, state.strip(), reason.strip())


def pending_reasons(job_ids: Sequence[str]) -> dict[str, str]:
    """squeue's reason of each pending job among ``job_ids`` (one squeue call)."""
    if not job_ids:
        return {}
    try:
        result = _run(["squeue", "-h", "-r", "-t", "PENDING", "-o", "%i|%r"])
    except (OSError, subprocess.SubprocessError):
        return {}
    wanted = set(job_ids)
    out = {}
    for line in result.stdout.splitlines():
        job, _, reason = line.strip().partition("|")
        if job in wanted:
            out[job] = reason
    return out
