"""The journal's log records as typed dataclasses, one per kind, and the registry of kinds.

A record's ``to_data`` gives the JSON object of the log's ``data`` column and ``from_data``
reads one back, checking that every key the record needs is there with the right type (a
:class:`RecordError`, a :class:`~hpctune.errors.JournalError`, names the kind and the key
otherwise). Keys are optional where readers have always allowed them to be missing; a key made
with :func:`optional` is left out of the data while it is ``None``. Keys a record does not know
are ignored (a newer minor version may add some).
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Self, Union, get_args, get_origin, get_type_hints

from hpctune.errors import JournalError
from hpctune.study.states import SegmentStatus, StudyState, TrialStatus

_Convert = Callable[[Any], Any]


class RecordError(JournalError):
    """A log record's data is not a valid record of its kind (a key missing or mistyped)."""


def optional(default: Any = None) -> Any:
    """A key that may be missing (read as ``default``) and is left out while it is ``None``."""
    return field(default=default, metadata={"omit_none": True})


@dataclass(frozen=True, slots=True, kw_only=True)
class LogEntry:
    """The base of the log records: ``kind`` names the record's kind."""

    kind: ClassVar[str] = ""

    def to_data(self) -> dict[str, Any]:
        """The record's JSON object (the log's ``data`` column)."""
        data: dict[str, Any] = {}
        for name, _, _, omit_none in _layout(type(self)):
            value = getattr(self, name)
            if value is None and omit_none:
                continue
            data[name] = value.value if isinstance(value, Enum) else value
        return data

    @classmethod
    def from_data(cls, data: Any) -> Self:
        """The record of a ``data`` object read from the log.

        Raises:
            RecordError: A key it needs is missing or of the wrong type (naming both).
        """
        if not isinstance(data, Mapping):
            raise RecordError(
                f"a {cls.kind!r} record's data must be an object, not {type(data).__name__}"
            )
        values: dict[str, Any] = {}
        for name, convert, required, _ in _layout(cls):
            if name not in data:
                if required:
                    raise RecordError(f"a {cls.kind!r} record has no {name!r}")
                continue
            try:
                values[name] = convert(data[name])
            except (TypeError, ValueError) as exc:
                raise RecordError(f"a {cls.kind!r} record's {name!r} {exc}") from exc
        return cls(**values)


# -- the record kinds ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class StudyEntry(LogEntry):
    """The study's state changed (``spec``: its first record, the study's settings)."""

    kind: ClassVar[str] = "study"
    state: StudyState
    spec: dict[str, Any] | None = optional()
    reason: str = ""
    fail: bool | None = optional()  # a stop because of a failure (it ends as failed)


@dataclass(frozen=True, slots=True, kw_only=True)
class TrialCreatedEntry(LogEntry):
    """A trial was created (``parent_*``: forked from that trial's checkpoint)."""

    kind: ClassVar[str] = "trial_created"
    params: dict[str, Any]
    generator_index: int | None = optional()
    seed: int
    priority: float | None = optional()
    end_step: int | None = optional()
    generation: int | None = optional()
    initiator: int | None = optional()
    parent_trial: int | None = optional()
    parent_step: int | None = optional()
    parent_checkpoint_row: int | None = optional()
    info: dict[str, Any] | None = optional()


@dataclass(frozen=True, slots=True, kw_only=True)
class TrialStatusEntry(LogEntry):
    """A trial's status changed."""

    kind: ClassVar[str] = "trial_status"
    status: TrialStatus
    reason: str = ""
    error: str | None = optional()
    retries: int | None = optional()
    priority: float | None = optional()


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentAssignedEntry(LogEntry):
    """A segment of a trial was given to a worker."""

    kind: ClassVar[str] = "segment_assigned"
    worker: str
    start_step: int
    until_step: int
    checkpoint_row: int | None = None
    checkpoint_steps: list[int] | None = optional()  # stage trees: save checkpoints at these
    stages: list[int] | None = optional()  # stage trees: the stage ids of its path


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentStartedEntry(LogEntry):
    """A segment's worker started it (``at``: the worker's clock)."""

    kind: ClassVar[str] = "segment_started"
    host: str = ""
    pid: int | None = None
    slurm_job_id: str | None = None
    at: float | None = optional()


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentEndedEntry(LogEntry):
    """A segment ended (``at``: the worker's clock, ``step``: the last step it reached)."""

    kind: ClassVar[str] = "segment_ended"
    status: SegmentStatus
    step: int | None = None
    reason: str = ""
    at: float | None = optional()


@dataclass(frozen=True, slots=True, kw_only=True)
class DecisionEntry(LogEntry):
    """A decision sent to a running segment, or a new priority of a trial."""

    kind: ClassVar[str] = "decision"
    step: int | None = optional()
    decision: str = ""  # "continue", "suspend" or "stop"
    reason: str = ""
    priority: float | None = optional()


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerEntry(LogEntry):
    """A worker's life: ``event`` is a :class:`~hpctune.study.states.WorkerLife` value or
    ``submitted``, ``running`` (a process of it started ``since``) or ``down`` (it ended
    ``at``)."""

    kind: ClassVar[str] = "worker"
    worker: str
    event: str
    info: dict[str, Any] | None = optional()
    reason: str | None = optional()
    since: float | None = optional()
    at: float | None = optional()
    job: str | None = optional()  # written (maybe null) by every ``running`` event
    pid: int | None = optional()
    host: str | None = optional()
    devices: int | None = optional()  # ``started``: the size the elastic plan gave it

    def to_data(self) -> dict[str, Any]:
        """The record's JSON object (a ``running`` event names its Slurm job, or null)."""
        data = LogEntry.to_data(self)
        if self.event == "running" and "job" not in data:
            data = {k: data.get(k) for k in _keys(self) if k in data or k == "job"}
        return data


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandEntry(LogEntry):
    """An inbox file was carried out, or refused (``rejected``: why)."""

    kind: ClassVar[str] = "command"
    file: str = ""
    command: Any = None
    rejected: str | None = optional()


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyStateEntry(LogEntry):
    """The policy's whole state."""

    kind: ClassVar[str] = "policy_state"
    state: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyDeltaEntry(LogEntry):
    """A patch of the last policy state (:mod:`hpctune.journal.delta`)."""

    kind: ClassVar[str] = "policy_delta"
    delta: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointDeletedEntry(LogEntry):
    """Checkpoints were deleted (their rows in the checkpoints table)."""

    kind: ClassVar[str] = "checkpoint_deleted"
    rows: list[int]


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerEntry(LogEntry):
    """A controller started: its epoch and where it runs."""

    kind: ClassVar[str] = "controller"
    event: str = ""
    epoch: int | None = optional()
    pid: int | None = optional()
    host: str | None = optional()
    job: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PredictionEntry(LogEntry):
    """A learning-curve prediction of a trial (its result file at ``path``)."""

    kind: ClassVar[str] = "prediction"
    n: int
    path: str
    unknown: bool = False
    median: float | None = None
    y_sha256: str = ""
    seconds: float | None = None  # the fit's (null if not measured)
    backend: str | None = optional()
    reason: str | None = optional()


@dataclass(frozen=True, slots=True, kw_only=True)
class LineageEntry(LogEntry):
    """A stage-tree trial goes on from another trial's checkpoint."""

    kind: ClassVar[str] = "lineage"
    parent_trial: int
    parent_step: int
    parent_checkpoint_row: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestEntry(LogEntry):
    """A stage-tree tuner asks for a trial to be trained up to ``until_step``."""

    kind: ClassVar[str] = "request"
    until_step: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportedEntry(LogEntry):
    """A stage-tree trial starts from another study's checkpoint (the stage store)."""

    kind: ClassVar[str] = "imported"
    study: str | None = None
    source_trial: int | None = None
    step: int | None = None
    key: str | None = None
    checkpoint_row: int | None = optional()


@dataclass(frozen=True, slots=True, kw_only=True)
class WarningEntry(LogEntry):
    """Something the user should know (``code`` tells its kind)."""

    kind: ClassVar[str] = "warning"
    code: str = ""
    message: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class CorruptLinesEntry(LogEntry):
    """Corrupt lines of a segment's event file were skipped (``rows`` may have held a report,
    after ``step``)."""

    kind: ClassVar[str] = "corrupt_lines"
    file: str | None = optional()
    line_kind: str | None = optional()
    rows: int = 0
    step: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmissionEntry(LogEntry):
    """Submitting workers failed (sbatch's message in ``error``)."""

    kind: ClassVar[str] = "submission"
    error: str = ""
    workers: list[str] | None = optional()


@dataclass(frozen=True, slots=True, kw_only=True)
class SettingsChangedEntry(LogEntry):
    """New settings of the backend's section (``hpctune resume --set``) for the jobs it starts
    next: ``settings`` is the section's JSON form, ``changes`` ``{key: [old, new]}``."""

    kind: ClassVar[str] = "settings_changed"
    section: str
    settings: dict[str, Any]
    changes: dict[str, Any] = field(default_factory=dict)
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class SlurmChangedEntry(LogEntry):
    """New ``[slurm]`` settings, as journals before backends were plug-ins wrote them (read
    as a :class:`SettingsChangedEntry` of the section ``slurm``)."""

    kind: ClassVar[str] = "slurm_changed"
    slurm: dict[str, Any]
    changes: dict[str, Any] = field(default_factory=dict)
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ElasticPlanEntry(LogEntry):
    """The plan a study with a deadline follows (:func:`hpctune.elastic.follow.plan_record`)."""

    kind: ClassVar[str] = "elastic_plan"
    reason: str = ""
    plan: dict[str, Any]
    stage_ends: list[float]
    profile: str | None = optional()
    profile_data: dict[str, Any] | None = optional()


@dataclass(frozen=True, slots=True, kw_only=True)
class ElasticStageEntry(LogEntry):
    """The controller moved to a stage of the deadline's plan (``workers``: its pool)."""

    kind: ClassVar[str] = "elastic_stage"
    stage: int
    workers: int | None = optional()


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadlineChangedEntry(LogEntry):
    """A new ``[resources] deadline`` (seconds from the study's start; ``hpctune resume
    --deadline``): ``previous`` is the one it replaces (``None``: the study had none)."""

    kind: ClassVar[str] = "deadline_changed"
    deadline: float
    previous: float | None = optional()
    source: str = ""


#: The record type of each kind (a reader refuses other kinds unless the journal's minor
#: version is newer: add a kind here and raise ``FORMAT_MINOR`` in hpctune/journal/store.py).
RECORD_TYPES: dict[str, type[LogEntry]] = {
    t.kind: t
    for t in (
        StudyEntry,
        TrialCreatedEntry,
        TrialStatusEntry,
        SegmentAssignedEntry,
        SegmentStartedEntry,
        SegmentEndedEntry,
        DecisionEntry,
        WorkerEntry,
        CommandEntry,
        PolicyStateEntry,
        PolicyDeltaEntry,
        CheckpointDeletedEntry,
        ControllerEntry,
        PredictionEntry,
        LineageEntry,
        RequestEntry,
        ImportedEntry,
        WarningEntry,
        CorruptLinesEntry,
        SubmissionEntry,
        SlurmChangedEntry,
        SettingsChangedEntry,
        ElasticPlanEntry,
        ElasticStageEntry,
        DeadlineChangedEntry,
    )
}


# -- reading and writing the fields --------------------------------------------------------

# each record type's fields: (name, converter, required, left out while None)
_LAYOUTS: dict[type, list[tuple[str, _Convert, bool, bool]]] = {}


def _layout(cls: type) -> list[tuple[str, _Convert, bool, bool]]:
    layout = _LAYOUTS.get(cls)
    if layout is None:
        hints = get_type_hints(cls)
        layout = _LAYOUTS[cls] = [
            (
                f.name,
                _converter(hints[f.name]),
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
                bool(f.metadata.get("omit_none")),
            )
            for f in dataclasses.fields(cls)
        ]
    return layout


def _keys(entry: LogEntry) -> list[str]:
    return [name for name, _, _, _ in _layout(type(entry))]


def _converter(tp: Any) -> _Convert:
    """A function that returns a JSON value as type ``tp`` (an int as a float, a string as an
    enum) or raises ``TypeError``/``ValueError`` saying what it should be."""
    if tp is Any:
        return lambda value: value
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"unsupported record field type {tp}")
        inner = _converter(args[0])
        return lambda value: None if value is None else inner(value)
    if origin is list:
        item = _converter(get_args(tp)[0])

        def convert_list(value: Any) -> list[Any]:
            if not isinstance(value, list):
                raise TypeError(f"must be a list, not {_type_name(value)}")
            items = []
            for i, v in enumerate(value):
                try:
                    items.append(item(v))
                except (TypeError, ValueError) as exc:
                    raise type(exc)(f"item {i} {exc}") from None
            return items

        return convert_list
    if origin is dict:
        return _checker(dict, "an object")
    if isinstance(tp, type) and issubclass(tp, Enum):
        enum = tp

        def convert_enum(value: Any) -> Any:
            if not isinstance(value, str):
                raise TypeError(f"must be a string, not {_type_name(value)}")
            try:
                return enum(value)
            except ValueError:
                choices = [e.value for e in enum]
                raise ValueError(f"must be one of {choices}, not {value!r}") from None

        return convert_enum
    if tp is float:

        def convert_float(value: Any) -> float:
            if type(value) is float:
                return value
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"must be a number, not {_type_name(value)}")
            return float(value)

        return convert_float
    if tp is int:
        return _checker(int, "an integer")
    if tp is bool:
        return _checker(bool, "true or false")
    if tp is str:
        return _checker(str, "a string")
    raise TypeError(f"unsupported record field type {tp}")


def _checker(tp: type, what: str) -> _Convert:
    """A converter that accepts values of ``tp`` only (not a bool as an int)."""

    def check(value: Any) -> Any:
        if type(value) is tp:
            return value
        if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
            raise TypeError(f"must be {what}, not {_type_name(value)}")
        return value

    return check


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__
