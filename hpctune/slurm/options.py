"""The ``[slurm]`` and ``[slurm.controller]`` sections of study.toml: what hpctune asks Slurm for.

Parsed into frozen :class:`SlurmSpec` / :class:`JobOptions`; everything is optional (a study that
never runs on Slurm needs no ``[slurm]`` section).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hpctune.errors import StudySpecError, check_table_keys

_TIME_RE = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")

#: Time limits when ``time`` is not set, capped by the partition's ``MaxTime``.
DEFAULT_WORKER_TIME_MIN = 60
DEFAULT_CONTROLLER_TIME_MIN = 24 * 60


@dataclass(frozen=True)
class JobOptions:
    """Options of one kind of Slurm job (the workers, or the controller).

    Attributes:
        partition: ``--partition`` (None: the cluster's default).
        account: ``--account``.
        qos: ``--qos``.
        constraint: ``--constraint``.
        time_min: The time limit in minutes (``--time``); None: the default
            (:data:`DEFAULT_WORKER_TIME_MIN` or :data:`DEFAULT_CONTROLLER_TIME_MIN`, at most the
            partition's ``MaxTime``), chosen when the job is submitted.
        cpus: ``--cpus-per-task`` (the controller's; workers take ``[resources]`` cpus).
        mem_gb: Memory in GB (``--mem``); None: the partition's default.
        setup: Shell lines run before the job's command (``module load ...``).
        extra: Further sbatch options, e.g. ``{reservation = "ml", exclusive = true}``.
    """

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    time_min: int | None = None
    cpus: int = 1
    mem_gb: float | None = None
    setup: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        data = asdict(self)
        data["setup"] = list(self.setup)
        data["extra"] = dict(self.extra)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobOptions:
        """Inverse of :meth:`to_dict`."""
        values = dict(data)
        values["setup"] = tuple(values.get("setup", ()))
        return cls(**values)


@dataclass(frozen=True)
class SlurmSpec:
    """How a study uses Slurm.

    Attributes:
        worker: Options of the worker jobs (GPUs and CPUs come from ``[resources]``).
        controller: Options of the controller's batch job.
        signal_delay_s: Workers get SIGUSR2 this long before their time limit, to checkpoint.
        max_pending: At most this many worker jobs wait in the queue at once.
        controller_timeout_s: A worker exits (once idle) after the controller was silent this
            long; a requeued or resumed controller within this time adopts it.
    """

    worker: JobOptions = field(default_factory=JobOptions)
    controller: JobOptions = field(default_factory=lambda: JobOptions(mem_gb=4))
    signal_delay_s: int = 90
    max_pending: int = 16
    controller_timeout_s: int = 600

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "worker": self.worker.to_dict(),
            "controller": self.controller.to_dict(),
            "signal_delay_s": self.signal_delay_s,
            "max_pending": self.max_pending,
            "controller_timeout_s": self.controller_timeout_s,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SlurmSpec:
        """Inverse of :meth:`to_dict`."""
        return cls(
            worker=JobOptions.from_dict(data["worker"]),
            controller=JobOptions.from_dict(data["controller"]),
            signal_delay_s=int(data["signal_delay_s"]),
            max_pending=int(data["max_pending"]),
            controller_timeout_s=int(data["controller_timeout_s"]),
        )


def slurm_spec(spec: Any) -> SlurmSpec:
    """The ``[slurm]`` settings of a study spec (its ``backend_options["slurm"]``; the
    defaults when the study.toml has no ``[slurm]``)."""
    data = spec.backend_options.get(SECTION)
    return SlurmSpec() if data is None else SlurmSpec.from_dict(data)


def with_slurm(spec: Any, slurm: SlurmSpec) -> Any:
    """``spec`` (a :class:`~hpctune.spec.StudySpec`) with the ``[slurm]`` settings ``slurm``."""
    return spec.with_backend_options(SECTION, slurm.to_dict())


#: The study.toml section of the Slurm backend.
SECTION = "slurm"

JOB_KEYS = ("partition", "account", "qos", "constraint", "time", "mem", "setup", "extra")
CONTROLLER_KEYS = (*JOB_KEYS, "cpus")
SLURM_KEYS = (*JOB_KEYS, "signal_delay_s", "max_pending", "controller_timeout_s", "controller")


def parse_slurm(table: Mapping[str, Any], path: Path) -> SlurmSpec:
    """Check the ``[slurm]`` table (with its ``[slurm.controller]`` sub-table).

    Raises:
        StudySpecError: naming ``slurm.<key>`` or ``slurm.controller.<key>``.
    """
    check_table_keys(table, SLURM_KEYS, "slurm", path)
    controller_table = table.get("controller", {})
    if not isinstance(controller_table, Mapping):
        raise StudySpecError(
            path,
            "slurm.controller",
            f"must be a table ([slurm.controller]), but got {controller_table!r}",
        )
    check_table_keys(controller_table, CONTROLLER_KEYS, "slurm.controller", path)
    defaults = SlurmSpec()
    return SlurmSpec(
        worker=_job(table, "slurm", path, defaults.worker),
        controller=_job(controller_table, "slurm.controller", path, defaults.controller),
        signal_delay_s=_int(table, "signal_delay_s", defaults.signal_delay_s, 0, path),
        max_pending=_int(table, "max_pending", defaults.max_pending, 1, path),
        controller_timeout_s=_int(
            table, "controller_timeout_s", defaults.controller_timeout_s, 10, path
        ),
    )


def slurm_table(slurm: SlurmSpec) -> dict[str, Any]:
    """The ``[slurm]`` table (study.toml form) that :func:`parse_slurm` turns into ``slurm``."""
    table = _job_table(slurm.worker)
    table.update(
        signal_delay_s=slurm.signal_delay_s,
        max_pending=slurm.max_pending,
        controller_timeout_s=slurm.controller_timeout_s,
        controller={**_job_table(slurm.controller), "cpus": slurm.controller.cpus},
    )
    return table


def _job_table(options: JobOptions) -> dict[str, Any]:
    table: dict[str, Any] = {
        key: getattr(options, key)
        for key in ("partition", "account", "qos", "constraint")
        if getattr(options, key) is not None
    }
    if options.time_min is not None:
        table["time"] = options.time_min
    if options.mem_gb is not None:
        table["mem"] = options.mem_gb
    if options.setup:
        table["setup"] = list(options.setup)
    if options.extra:
        table["extra"] = dict(options.extra)
    return table


def _job(table: Mapping[str, Any], name: str, path: Path, default: JobOptions) -> JobOptions:
    strings = {}
    for key in ("partition", "account", "qos", "constraint"):
        value = table.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise StudySpecError(
                path,
                f"{name}.{key}",
                f"`{name}.{key}` must be a non-empty string, but got {value!r}",
            )
        strings[key] = value
    time_min = default.time_min
    if "time" in table:
        time_min = parse_time(table["time"], path, f"{name}.time")
    mem_gb = default.mem_gb
    if "mem" in table:
        mem_gb = parse_mem(table["mem"], path, f"{name}.mem")
    setup = table.get("setup", [])
    if not isinstance(setup, list) or not all(isinstance(line, str) for line in setup):
        raise StudySpecError(
            path,
            f"{name}.setup",
            f"`{name}.setup` must be a list of shell lines, e.g. "
            f'["module load cuda"], but got {setup!r}',
        )
    extra = table.get("extra", {})
    if not isinstance(extra, Mapping) or not all(
        isinstance(v, str | int | float | bool) and not isinstance(v, Mapping)
        for v in extra.values()
    ):
        raise StudySpecError(
            path,
            f"{name}.extra",
            f"`{name}.extra` must be a table of sbatch options, e.g. "
            f'{{ reservation = "ml", exclusive = true }}, but got {extra!r}',
        )
    cpus = table.get("cpus", default.cpus)
    if not isinstance(cpus, int) or isinstance(cpus, bool) or cpus < 1:
        raise StudySpecError(
            path, f"{name}.cpus", f"`{name}.cpus` must be an integer >= 1, but got {cpus!r}"
        )
    return JobOptions(
        time_min=time_min,
        cpus=cpus,
        mem_gb=mem_gb,
        setup=tuple(setup),
        extra=dict(extra),
        **strings,
    )


def _int(table: Mapping[str, Any], key: str, default: int, low: int, path: Path) -> int:
    value = table.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise StudySpecError(
            path, f"slurm.{key}", f"`slurm.{key}` must be an integer >= {low}, but got {value!r}"
        )
    return value


def parse_time(value: Any, path: Path | None, field_name: str) -> int:
    """Parse a Slurm time (minutes as an int, or "MM", "HH:MM:SS", "D-HH", "D-HH:MM[:SS]")
    into whole minutes (rounded up)."""
    message = (
        f"`{field_name}` must be minutes (an integer >= 1) or a Slurm time such as "
        f'"04:00:00" or "1-12:00:00", but got {value!r}'
    )
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise StudySpecError(path, field_name, message)
        return value
    if not isinstance(value, str):
        raise StudySpecError(path, field_name, message)
    match = _TIME_RE.fullmatch(value.strip())
    if match is None:
        raise StudySpecError(path, field_name, message)
    days, first, second, third = match.groups()
    if days is not None:  # D-HH[:MM[:SS]]
        seconds = int(days) * 86400 + int(first) * 3600 + int(second or 0) * 60 + int(third or 0)
    elif third is not None:  # HH:MM:SS
        seconds = int(first) * 3600 + int(second) * 60 + int(third)
    elif second is not None:  # MM:SS
        seconds = int(first) * 60 + int(second)
    else:  # MM
        seconds = int(first) * 60
    if seconds <= 0:
        raise StudySpecError(path, field_name, message)
    return math.ceil(seconds / 60)


def parse_mem(value: Any, path: Path | None, field_name: str) -> float:
    """Parse a memory size ("16G", "512M", "1T" or a number of GB) into GB."""
    message = (
        f'`{field_name}` must be a size such as "16G" or "512M" (or a number of GB), '
        f"but got {value!r}"
    )
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value <= 0:
            raise StudySpecError(path, field_name, message)
        return float(value)
    if not isinstance(value, str):
        raise StudySpecError(path, field_name, message)
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)B?\s*", value.upper())
    if match is None or float(match.group(1)) <= 0:
        raise StudySpecError(path, field_name, message)
    scale = {"K": 1 / 1024**2, "M": 1 / 1024, "G": 1.0, "T": 1024.0, "": 1 / 1024}
    return float(match.group(1)) * scale[match.group(2)]
