"""The checked study spec as frozen dataclasses, and their JSON form (what the journal keeps)."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpctune.curves.options import CurvesSpec
from hpctune.errors import StudySpecError
from hpctune.journal.best import DEFAULT_KEEP
from hpctune.policies import StudyContext
from hpctune.spec.entry_point import EntryPoint
from hpctune.stagetree.options import StagesSpec
from hpctune.study.space import SearchSpace
from hpctune.study.states import Mode

DEFAULT_REPORT_TIMEOUT = 3600.0


@dataclass(frozen=True)
class ComponentSpec:
    """A policy or generator: its name and its options (the rest of its table)."""

    name: str
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ResourcesSpec:
    """What the study may hold.

    Attributes:
        slots: How many workers run at once; 0: none (trials come from ask/tell only). With
            a ``deadline``: the most devices the plan may hold at once.
        cpus_per_worker: CPUs of each worker.
        gpus_per_worker: GPUs of each worker.
        deadline: Seconds from the study's start by which it should end: the controller
            follows the elastic plan (:mod:`hpctune.core.elastic`); ``None``: a fixed
            pool of ``slots`` workers.
        profile: The elastic planner's profile (absolute); ``None``: ``profile.json`` in the
            study directory.
        price: With a ``deadline``: money per billed hour (with a billing weight of 1: per
            device-hour); the plan's costs are in money. ``None``: no money.
        billing_weight: With a ``deadline``: billed units per device-hour, or ``"partition"``
            to read it from the workers' partition's ``TRESBillingWeights`` when the study is
            planned. ``None``: 1 (plain device-hours).
        max_devices: With a ``deadline`` (here, or given at launch or resume; without one
            it is kept for then): the most devices per trial the plan may give (a
            trial is resized between rungs: its worker holds that many devices, and it goes on
            from its checkpoint on a worker of the next rung's size). A device is a GPU, or a
            CPU when ``gpus_per_worker = 0``.
        node_devices: With a ``deadline``: the devices of one node. A trial of more devices
            than a node has gets whole nodes, and a worker that needs a whole node asks for it
            exclusively; ``None``: sizes are not bound to nodes.
    """

    slots: int = 2
    cpus_per_worker: int = 1
    gpus_per_worker: int = 0
    deadline: float | None = None
    profile: Path | None = None
    price: float | None = None
    billing_weight: float | str | None = None
    max_devices: int = 1
    node_devices: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the keys of an older journal's spec are the first three)."""
        return {
            "slots": self.slots,
            "cpus_per_worker": self.cpus_per_worker,
            "gpus_per_worker": self.gpus_per_worker,
            "deadline": self.deadline,
            "profile": None if self.profile is None else str(self.profile),
            "price": self.price,
            "billing_weight": self.billing_weight,
            "max_devices": self.max_devices,
            "node_devices": self.node_devices,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ResourcesSpec:
        """Rebuild from :meth:`to_dict`."""
        deadline, profile = data.get("deadline"), data.get("profile")
        price, weight = data.get("price"), data.get("billing_weight")
        return cls(
            slots=int(data["slots"]),
            cpus_per_worker=int(data["cpus_per_worker"]),
            gpus_per_worker=int(data["gpus_per_worker"]),
            deadline=None if deadline is None else float(deadline),
            profile=None if profile is None else Path(profile),
            price=None if price is None else float(price),
            billing_weight=weight if weight is None or isinstance(weight, str) else float(weight),
            max_devices=int(data.get("max_devices", 1)),
            node_devices=None if data.get("node_devices") is None else int(data["node_devices"]),
        )


@dataclass(frozen=True)
class StudySpec:
    """A checked study spec, every path absolute and every default filled in.

    Attributes:
        source: The absolute path of the study.toml.
        name: The study's name.
        directory: The study directory (absolute).
        entry: The training function.
        metric: The metric the study optimises.
        mode: ``"max"`` or ``"min"``.
        max_steps: The last step of a trial (>= 1).
        step_unit: What a step is called (``"epoch"``).
        boundary: The evaluation boundary, in steps.
        num_trials: How many trials the generator creates.
        seed: The master seed.
        fail_fast: Stop the study at the first failed trial.
        max_retries: How often a trial is restarted after its worker was lost.
        metric_bounds: ``(low, high)``: the range of the metric (curve models normalise by it).
        random_level: The metric of a model that learnt nothing (e.g. 0.1 for 10 classes), or
            None: POP's default kill threshold and traces use it.
        share_with_group: The study directory is readable by the owner's group (0750/0640
            instead of 0700/0600; never writable by it).
        report_timeout: Seconds a running trial may go without a report before its worker is
            cancelled and the trial resumes from its checkpoint (a retry); 0: no limit.
        space: The search space.
        generator: The generator and its options.
        policy: The policy and its options.
        resources: Workers and their sizes.
        backend_options: The sections of the backends (``{"slurm": {...}}``: ``[slurm]``),
            each in its backend's JSON form (:meth:`hpctune.backends.Backend.parse_options`).
        curves: Where and how learning-curve fits run (``[curves]``).
        stages: Whether the study runs as a stage tree (``[stages]``).
        objectives: ``(metric, mode)`` of each objective of a multi-objective study (``[study]
            objectives``, two or more; ``metric`` is one of them); empty otherwise.
        best: What a trial's value is: ``"peak"`` (its best step) or ``"last"`` (its last
            step); :mod:`hpctune.journal.best`.
        keep_checkpoints: Which checkpoints of ended trials are kept: ``"last"``, ``"best"``
            or ``"best_and_last"``.
    """

    source: Path
    name: str
    directory: Path
    entry: EntryPoint
    metric: str
    mode: Mode
    max_steps: int
    step_unit: str
    boundary: int
    num_trials: int
    seed: int
    fail_fast: bool
    max_retries: int
    space: SearchSpace
    generator: ComponentSpec
    policy: ComponentSpec
    resources: ResourcesSpec
    backend_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    metric_bounds: tuple[float, float] = (0.0, 1.0)
    random_level: float | None = None
    report_timeout: float = DEFAULT_REPORT_TIMEOUT
    curves: CurvesSpec = field(default_factory=CurvesSpec)
    stages: StagesSpec = field(default_factory=StagesSpec)
    share_with_group: bool = False
    objectives: tuple[tuple[str, str], ...] = ()
    best: str = "peak"
    keep_checkpoints: str = DEFAULT_KEEP

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-able dict (paths as strings) that :meth:`from_dict` turns back."""
        return {
            "source": str(self.source),
            "name": self.name,
            "directory": str(self.directory),
            "entry": {
                "file": None if self.entry.file is None else str(self.entry.file),
                "module": self.entry.module,
                "function": self.entry.function,
            },
            "metric": self.metric,
            "mode": self.mode,
            "max_steps": self.max_steps,
            "step_unit": self.step_unit,
            "boundary": self.boundary,
            "num_trials": self.num_trials,
            "seed": self.seed,
            "fail_fast": self.fail_fast,
            "max_retries": self.max_retries,
            "space": self.space.to_dict(),
            "generator": {"name": self.generator.name, "options": dict(self.generator.options)},
            "policy": {"name": self.policy.name, "options": dict(self.policy.options)},
            "resources": self.resources.to_dict(),
            **{
                name: copy.deepcopy(dict(options))
                for name, options in self.backend_options.items()
            },
            "metric_bounds": list(self.metric_bounds),
            "random_level": self.random_level,
            "report_timeout": self.report_timeout,
            "curves": self.curves.to_dict(),
            "stages": self.stages.to_dict(),
            "share_with_group": self.share_with_group,
            "objectives": [list(o) for o in self.objectives],
            "best": self.best,
            "keep_checkpoints": self.keep_checkpoints,
        }

    def with_backend_options(self, section: str, options: Mapping[str, Any]) -> StudySpec:
        """This spec with the backend section ``section`` replaced by ``options`` (its JSON
        form)."""
        sections = {**self.backend_options, section: dict(options)}
        return dataclasses.replace(self, backend_options=sections)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StudySpec:
        """Rebuild a spec from :meth:`to_dict` (no files are checked).

        Every key that is not a field of the spec and holds a table is a backend's section
        (``slurm``, as every journal before backends were plug-ins has it).

        Raises:
            StudySpecError: A key is missing (``field`` names it).
        """
        try:
            entry = d["entry"]
            return cls(
                source=Path(d["source"]),
                name=d["name"],
                directory=Path(d["directory"]),
                entry=EntryPoint(
                    file=None if entry["file"] is None else Path(entry["file"]),
                    module=entry["module"],
                    function=entry["function"],
                ),
                metric=d["metric"],
                mode=d["mode"],
                max_steps=d["max_steps"],
                step_unit=d["step_unit"],
                boundary=d["boundary"],
                num_trials=d["num_trials"],
                seed=d["seed"],
                fail_fast=d["fail_fast"],
                max_retries=d["max_retries"],
                space=SearchSpace.from_dict(d["space"]),
                generator=ComponentSpec(
                    d["generator"]["name"], copy.deepcopy(dict(d["generator"]["options"]))
                ),
                policy=ComponentSpec(
                    d["policy"]["name"], copy.deepcopy(dict(d["policy"]["options"]))
                ),
                resources=ResourcesSpec.from_dict(d["resources"]),
                backend_options={
                    k: copy.deepcopy(dict(v))
                    for k, v in d.items()
                    if k not in _FIELDS and isinstance(v, Mapping)
                },
                metric_bounds=tuple(d.get("metric_bounds", (0.0, 1.0))),  # type: ignore[arg-type]
                random_level=d.get("random_level"),
                report_timeout=float(d.get("report_timeout", DEFAULT_REPORT_TIMEOUT)),
                curves=CurvesSpec.from_dict(d.get("curves", {})),
                stages=StagesSpec.from_dict(d.get("stages", {})),
                share_with_group=bool(d.get("share_with_group", False)),
                objectives=tuple((str(m), str(o)) for m, o in d.get("objectives", [])),
                best=d.get("best", "peak"),
                keep_checkpoints=d.get("keep_checkpoints", "last"),  # journals before it: last
            )
        except KeyError as exc:
            raise StudySpecError(
                None, str(exc.args[0]), "missing from the stored study spec"
            ) from None


def study_context(spec: StudySpec) -> StudyContext:
    """What the study's policy is built with (:class:`~hpctune.policies.StudyContext`): its
    ``max_steps``, ``mode`` and ``boundary``."""
    return StudyContext(max_steps=spec.max_steps, mode=spec.mode, boundary=spec.boundary)


#: The keys of :meth:`StudySpec.to_dict` that are not backend sections.
_FIELDS = frozenset(
    {
        "source",
        "name",
        "directory",
        "entry",
        "metric",
        "mode",
        "max_steps",
        "step_unit",
        "boundary",
        "num_trials",
        "seed",
        "fail_fast",
        "max_retries",
        "space",
        "generator",
        "policy",
        "resources",
        "metric_bounds",
        "random_level",
        "report_timeout",
        "curves",
        "stages",
        "share_with_group",
        "objectives",
        "best",
        "keep_checkpoints",
    }
)
