"""What the cluster allows: partitions, ``sbatch --test-only``, job states, pending reasons.

Used on the login node by ``hpctune launch`` and ``hpctune resume`` (before anything is created
or submitted, :mod:`hpctune.slurm.checks`) and by ``hpctune status``; in the controller job to
choose the default time limits. Every call has a timeout; a cluster that does not answer is
reported, never waited on forever.

* :func:`test_only` asks ``sbatch --test-only`` about a job's options.
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
from typing import Any

from hpctune.elastic.cost import device_billing, parse_tres_weights
from hpctune.errors import PlanningError, SubmissionError
from hpctune.slurm.options import (
    DEFAULT_CONTROLLER_TIME_MIN,
    DEFAULT_WORKER_TIME_MIN,
    JobOptions,
    parse_time,
    slurm_spec,
    with_slurm,
)
from hpctune.spec import StudySpec

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
    slurm = slurm_spec(spec)
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
    return with_slurm(spec, dataclasses.replace(slurm, worker=worker, controller=controller))


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


def partition_billing(spec: Any, partition: str | None, *, gpu: bool = True) -> tuple[float, str]:
    """Billed units per device-hour on ``partition`` (``None``: the study's ``[slurm]
    partition``, else the cluster's default) for a study spec's workers, and where it came from.

    Reads ``scontrol show partition``; one device comes with ``cpus_per_worker /
    gpus_per_worker`` CPUs and its share of ``[slurm] mem``.

    Raises:
        PlanningError: The partition is not known to Slurm (or Slurm cannot be asked).
    """
    name = partition or slurm_spec(spec).worker.partition
    part = find_partition(partitions(), name)
    if part is None:
        raise PlanningError(
            f"partition {name or '(the default)'} is not known to `scontrol show partition`; "
            "name one with --partition or give --billing-weight (in a study.toml: [slurm] "
            "partition, or a number as [resources] billing_weight)"
        )
    resources = spec.resources
    per_device = max(resources.gpus_per_worker, 1) if gpu else resources.cpus_per_worker
    mem = slurm_spec(spec).worker.mem_gb or 0.0
    weight = device_billing(
        parse_tres_weights(part.billing_weights),
        cpus_per_device=resources.cpus_per_worker / per_device,
        mem_gb_per_device=mem / per_device,
        gpu=gpu,
    )
    where = (
        f"TRESBillingWeights of partition {part.name}: {part.billing_weights or '(none: CPUs)'}"
    )
    return weight, where
