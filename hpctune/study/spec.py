"""The study spec: what a ``study.toml`` says, checked and resolved.

:func:`load_spec` reads a ``study.toml`` with :mod:`tomllib` and returns a frozen
:class:`StudySpec` with absolute paths and every default filled in. Every mistake is a
:class:`~hpctune.errors.StudySpecError` whose ``field`` is the dotted name of the bad value
(``study.boundary``, ``search_space.lr.low``, ``policy.eta``) and whose message says what must
hold, what was given and what to do. Loading never writes anything and never imports the
user's code (the CLI calls :meth:`EntryPoint.load` for that).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import hashlib
import importlib
import importlib.util
import math
import os
import re
import sys
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from hpctune.analysis.best import BEST_MODES, DEFAULT_KEEP, KEEP_MODES
from hpctune.curves.options import CurvesSpec, parse_curves
from hpctune.errors import StudySpecError
from hpctune.policies import OptionError, StudyContext, make_policy
from hpctune.policies.generators import make_generator
from hpctune.slurm.options import SlurmSpec, parse_slurm
from hpctune.stagetree.options import StagesSpec, parse_stages
from hpctune.study.metric_names import metric_name_problem
from hpctune.study.seeding import component_seed
from hpctune.study.space import NoGridError, SearchSpace, parse_space
from hpctune.wire.states import Mode

SECTIONS = (
    "study",
    "search_space",
    "generator",
    "policy",
    "resources",
    "slurm",
    "curves",
    "stages",
)
STUDY_KEYS = (
    "name",
    "directory",
    "entry_point",
    "metric",
    "mode",
    "max_steps",
    "step_unit",
    "boundary",
    "num_trials",
    "seed",
    "fail_fast",
    "max_retries",
    "metric_bounds",
    "random_level",
    "share_with_group",
    "objectives",
    "report_timeout",
    "best",
    "keep_checkpoints",
)
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
BILLING_FROM_PARTITION = "partition"  # [resources] billing_weight: read it from Slurm
DEFAULT_DIRECTORY = "runs/{name}-{timestamp}"
# Upper bounds of counts (a typo like 1e23 or 2**63-1 is refused, not run).
MAX_STEPS = 10**9
MAX_TRIALS = 10**6
MAX_RETRIES = 1000
MAX_SEED = 2**63 - 1
MAX_SLOTS = 10_000
MAX_CPUS = 4096
MAX_GPUS = 64
DEFAULT_REPORT_TIMEOUT = 3600.0
MAX_REPORT_TIMEOUT = 30 * 86400.0
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_DOTTED_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_REQUIRED = object()


@dataclass(frozen=True)
class EntryPoint:
    """The user's training function.

    Attributes:
        file: The absolute path of a ``.py`` file (for ``"train.py:train"``), or ``None``.
        module: The module (for ``"package.module:train"``), or ``None``.
        function: The function's name in the file or module (dotted for attributes).
    """

    file: Path | None
    module: str | None
    function: str

    def describe(self) -> str:
        """Return the entry point as written, with the file's absolute path."""
        return f"{self.file if self.file is not None else self.module}:{self.function}"

    def code(self) -> bytes:
        """The training file's bytes (a module: its name), what stage sharing must match."""
        return self.file.read_bytes() if self.file is not None else str(self.module).encode()

    def load(self) -> Callable[..., Any]:
        """Import the file or module and return the function.

        A file is imported under a module name unique to its path, with its folder put on
        ``sys.path`` (so that it can import its neighbours); loading twice returns the same
        function.

        Raises:
            StudySpecError: The file or module is missing or fails to import, or the function
                is missing or not callable (``field`` is ``study.entry_point``).
        """
        module = self._import()
        obj: Any = module
        for part in self.function.split("."):
            if not hasattr(obj, part):
                names = sorted(n for n, v in vars(module).items() if callable(v) and n[0] != "_")
                raise StudySpecError(
                    None,
                    "study.entry_point",
                    f"{self.describe()}: there is no `{self.function}` in "
                    f"{self.file or self.module}; callables defined there: "
                    f"{', '.join(names) or 'none'}",
                )
            obj = getattr(obj, part)
        if not callable(obj):
            raise StudySpecError(
                None,
                "study.entry_point",
                f"{self.describe()}: `{self.function}` must be a function, but it is a "
                f"{type(obj).__name__}",
            )
        return obj  # type: ignore[no-any-return]

    def _import(self) -> Any:
        if self.file is None:
            try:
                return importlib.import_module(str(self.module))
            except ImportError as exc:
                raise StudySpecError(
                    None,
                    "study.entry_point",
                    f"cannot import module {self.module!r} ({exc}); install its package or add "
                    "its folder to PYTHONPATH, or name a file instead (train.py:train)",
                ) from exc
            except Exception as exc:
                raise _import_failed(self.describe(), exc) from exc
        if not self.file.is_file():
            raise StudySpecError(None, "study.entry_point", f"the file {self.file} does not exist")
        digest = hashlib.sha1(str(self.file).encode("utf-8")).hexdigest()[:12]
        stem = re.sub(r"\W", "_", self.file.stem)
        name = f"hpctune_entry_{stem}_{digest}"
        if name in sys.modules:
            return sys.modules[name]
        folder = str(self.file.parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        spec = importlib.util.spec_from_file_location(name, self.file)
        if spec is None or spec.loader is None:
            raise StudySpecError(
                None, "study.entry_point", f"{self.file} cannot be imported as a Python file"
            )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[name]
            raise _import_failed(self.describe(), exc) from exc
        return module


def _import_failed(what: str, exc: Exception) -> StudySpecError:
    return StudySpecError(
        None,
        "study.entry_point",
        f"importing {what} failed with {type(exc).__name__}: {exc}; run it with "
        "`python -c 'import ...'` to see the traceback",
    )


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
        slurm: What the workers and the controller ask Slurm for.
        curves: Where and how learning-curve fits run (``[curves]``).
        stages: Whether the study runs as a stage tree (``[stages]``).
        objectives: ``(metric, mode)`` of each objective of a multi-objective study (``[study]
            objectives``, two or more; ``metric`` is one of them); empty otherwise.
        best: What a trial's value is: ``"peak"`` (its best step) or ``"last"`` (its last
            step); :mod:`hpctune.analysis.best`.
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
    slurm: SlurmSpec = field(default_factory=SlurmSpec)
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
            "slurm": self.slurm.to_dict(),
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

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StudySpec:
        """Rebuild a spec from :meth:`to_dict` (no files are checked).

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
                slurm=SlurmSpec.from_dict(d["slurm"]) if "slurm" in d else SlurmSpec(),
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


class _Section:
    """Typed access to one table of the spec, raising precise errors."""

    def __init__(self, path: Path, name: str, table: Mapping[str, Any]) -> None:
        self.path, self.name, self.table = path, name, table

    def error(self, key: str, message: str) -> StudySpecError:
        return StudySpecError(self.path, f"{self.name}.{key}", message)

    def check_keys(self, valid: tuple[str, ...]) -> None:
        for key in self.table:
            if key not in valid:
                close = difflib.get_close_matches(key, valid, n=1)
                hint = f"did you mean `{close[0]}`? " if close else ""
                raise self.error(
                    key, f"unknown key in [{self.name}]; {hint}valid keys: {', '.join(valid)}"
                )

    def get(self, key: str, default: Any, what: str) -> Any:
        if key in self.table:
            return self.table[key]
        if default is _REQUIRED:
            raise self.error(key, f"`{self.name}.{key}` is required: {what}")
        return default

    def must(self, key: str, rule: str, value: Any, hint: str = "") -> StudySpecError:
        shown = f"{value!r} ({type(value).__name__})" if isinstance(value, str) else repr(value)
        return self.error(
            key,
            f"`{self.name}.{key}` must be {rule}, but got {shown}" + (f"; {hint}" if hint else ""),
        )

    def string(self, key: str, default: Any = _REQUIRED, what: str = "") -> str:
        value = self.get(key, default, what)
        if not isinstance(value, str) or not value.strip():
            raise self.must(key, "a non-empty string", value)
        return value

    def integer(
        self,
        key: str,
        default: Any = _REQUIRED,
        *,
        low: int = 0,
        high: int | None = None,
        what: str = "",
        high_text: str = "",
        limit: int | None = None,
    ) -> int:
        """An integer >= ``low`` (and <= ``high``, named ``high_text``); ``limit``: hpctune's
        documented upper bound of the count (a typo such as 2**63-1 is refused)."""
        value = self.get(key, default, what)
        rule = f"an integer >= {low}" if high is None else f"between {low} and {high_text}"
        if not isinstance(value, int) or isinstance(value, bool):
            hint = "write it without quotes" if isinstance(value, str) else ""
            raise self.must(key, rule, value, hint)
        if value < low or (high is not None and value > high):
            raise self.must(key, rule, value)
        if limit is not None and value > limit:
            raise self.must(key, f"at most {limit} (hpctune's limit for it)", value)
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.get(key, default, "")
        if not isinstance(value, bool):
            raise self.must(key, "true or false", value)
        return value


def _table(data: Mapping[str, Any], key: str, path: Path, required: bool) -> Mapping[str, Any]:
    if key not in data:
        if required:
            raise StudySpecError(path, key, f"the [{key}] section is required")
        return {}
    value = data[key]
    if not isinstance(value, Mapping):
        raise StudySpecError(path, key, f"`{key}` must be a table ([{key}]), but got {value!r}")
    return value


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
    for key in data:
        if key not in SECTIONS:
            close = difflib.get_close_matches(key, SECTIONS, n=1)
            hint = f"did you mean [{close[0]}]? " if close else ""
            raise StudySpecError(
                source, key, f"unknown section; {hint}valid sections: {', '.join(SECTIONS)}"
            )
    study = _Section(source, "study", _table(data, "study", source, True))
    study.check_keys(STUDY_KEYS)
    name = study.string("name", what='a short name for the study, e.g. name = "resnet-lr"')
    if not _NAME_RE.fullmatch(name):
        raise study.must(
            "name",
            "letters, digits, '_', '.' and '-', starting with a letter or digit",
            name,
        )
    entry_text = study.string(
        "entry_point", what='the training function, e.g. entry_point = "train.py:train"'
    )
    entry = _parse_entry_point(entry_text, study)
    objectives = _objectives(study)
    first = objectives[0] if objectives else (_REQUIRED, _REQUIRED)
    metric = study.string(
        "metric",
        first[0],
        what='the metric the training function reports, e.g. metric = "val_loss"',
    )
    if metric_name_problem(metric):
        raise study.error("metric", metric_name_problem(metric))
    mode = study.get("mode", first[1], 'whether larger metric values are better: "max" or "min"')
    if mode not in ("max", "min"):
        raise study.must("mode", '"max" or "min"', mode)
    if objectives and (metric, mode) not in objectives:
        raise study.error(
            "metric",
            f"`study.metric` ({metric!r}, {mode}) must be one of the objectives "
            f"{dict(objectives)} with the same mode: the policies judge trials by it; leave "
            "`metric` and `mode` out to use the first objective",
        )
    max_steps = study.integer(
        "max_steps", low=1, limit=MAX_STEPS, what="the number of steps of a full trial"
    )
    step_unit = study.string("step_unit", "epoch")
    boundary = study.integer(
        "boundary", 1, low=1, high=max_steps, high_text=f"max_steps ({max_steps})"
    )
    seed = study.integer("seed", 0, low=0, limit=MAX_SEED)
    fail_fast = study.boolean("fail_fast", False)
    share_with_group = study.boolean("share_with_group", False)
    max_retries = study.integer("max_retries", 2, low=0, limit=MAX_RETRIES)
    report_timeout = _report_timeout(study)
    metric_bounds = _metric_bounds(study)
    random_level = study.get("random_level", None, "")
    if random_level is not None and (
        isinstance(random_level, bool)
        or not isinstance(random_level, int | float)
        or not metric_bounds[0] <= random_level <= metric_bounds[1]
    ):
        raise study.must(
            "random_level", f"a number within metric_bounds {list(metric_bounds)}", random_level
        )
    study_dir = _parse_directory(study, name, directory, now)

    space = parse_space(_table(data, "search_space", source, True), path=source)

    generator = _component(data, "generator", "random", source)
    sampler = generator.options.get("sampler") if generator.name == "optuna" else generator.name
    if objectives and sampler in SINGLE_OBJECTIVE:
        raise StudySpecError(
            source,
            "generator.name",
            f"the {sampler!r} generator optimises one metric, but [study] objectives "
            f"names {len(objectives)}; use tpe or nsga2 (or random, qmc, gp)",
        )
    try:
        gen = make_generator(
            generator.name, generator.options, space, component_seed(seed, "generator")
        )
    except OptionError as exc:
        raise StudySpecError(source, f"generator.{exc.key}", exc.message) from None
    except NoGridError as exc:
        raise StudySpecError(source, f"search_space.{exc.param}", exc.message) from None
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

    policy = _component(data, "policy", "default", source)
    try:
        context = StudyContext(max_steps=max_steps, mode=mode, boundary=boundary)
        policy_object = make_policy(policy.name, policy.options, context)
        policy_object.check_space(space)
    except OptionError as exc:
        raise StudySpecError(source, f"policy.{exc.key}", exc.message) from None
    except ValueError as exc:
        raise StudySpecError(source, "policy", str(exc)) from None
    # a policy that makes configurations (PBT) trains a model through a lineage: its final one
    best = _choice(
        study, "best", "last" if policy_object.traits.makes_configurations else "peak", BEST_MODES
    )
    keep_checkpoints = _choice(study, "keep_checkpoints", DEFAULT_KEEP, KEEP_MODES)

    res = _Section(source, "resources", _table(data, "resources", source, False))
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
        price=_positive(res, "price", "a number > 0 (money per billed hour)"),
        billing_weight=_billing_weight(res),
        max_devices=res.integer("max_devices", ResourcesSpec.max_devices, low=1, limit=MAX_GPUS),
        node_devices=(
            res.integer("node_devices", 1, low=1, limit=MAX_GPUS)
            if "node_devices" in res.table
            else None
        ),
    )
    slurm = parse_slurm(_table(data, "slurm", source, False), source)
    curves = parse_curves(_table(data, "curves", source, False), source)
    stages = parse_stages(
        _table(data, "stages", source, False), source, policy.name, entry.code(), metric
    )
    if resources.deadline is not None:
        _check_deadline(source, resources, policy.name, stages.enabled)
    for key, what in ELASTIC_ONLY.items():
        if resources.deadline is None and key in res.table:
            raise StudySpecError(
                source,
                f"resources.{key}",
                f"`resources.{key}` {what} of a study with a deadline; set "
                f"resources.deadline, or remove resources.{key}",
            )
    if stages.enabled and policy.name == "median" and policy.options.get("hard_stop") is False:
        raise StudySpecError(
            source,
            "policy.hard_stop",
            "over a stage tree (`stages.enabled = true`) the median rule terminates the trials "
            "it stops (a trial holds no worker to yield); remove `policy.hard_stop = false` or "
            "set stages.enabled = false",
        )
    return StudySpec(
        source=source,
        name=name,
        directory=study_dir,
        entry=entry,
        metric=metric,
        mode=mode,
        max_steps=max_steps,
        step_unit=step_unit,
        boundary=boundary,
        num_trials=num_trials,
        seed=seed,
        fail_fast=fail_fast,
        max_retries=max_retries,
        metric_bounds=metric_bounds,
        random_level=None if random_level is None else float(random_level),
        report_timeout=report_timeout,
        space=space,
        generator=generator,
        policy=policy,
        resources=resources,
        slurm=slurm,
        curves=curves,
        stages=stages,
        share_with_group=share_with_group,
        objectives=objectives,
        best=best,
        keep_checkpoints=keep_checkpoints,
    )


SINGLE_OBJECTIVE = ("cmaes",)


def _objectives(study: _Section) -> tuple[tuple[str, str], ...]:
    """``objectives = { metric = "max" | "min", ... }``: two or more, in order."""
    value = study.get("objectives", None, "")
    if value is None:
        return ()
    example = 'e.g. objectives = { val_accuracy = "max", num_params = "min" }'
    if not isinstance(value, Mapping) or len(value) < 2:
        raise study.must("objectives", f"a table of two or more metrics ({example})", value)
    for name, mode in value.items():
        if metric_name_problem(str(name)):
            raise study.error("objectives", metric_name_problem(str(name)))
        if mode not in ("max", "min"):
            raise study.error(
                "objectives",
                f'objective {name!r} must be "max" or "min", but got {mode!r} ({example})',
            )
    return tuple((str(k), str(v)) for k, v in value.items())


def _report_timeout(study: _Section) -> float:
    value = study.get("report_timeout", DEFAULT_REPORT_TIMEOUT, "")
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not 0 <= value <= MAX_REPORT_TIMEOUT:
        raise study.must(
            "report_timeout",
            f"seconds between 0 (no limit) and {MAX_REPORT_TIMEOUT:.0f} (30 days)",
            value,
            "set it above your longest step plus its checkpoint, e.g. report_timeout = 7200",
        )
    return float(value)


def with_deadline(spec: StudySpec, text: str | float) -> StudySpec:
    """``spec`` with ``[resources] deadline`` set to ``text`` (``hpctune launch --deadline``;
    seconds: ``resume --deadline``), checked as in the file.

    Raises:
        StudySpecError: ``text`` is not a duration, or the spec cannot follow a deadline.
    """
    res = _Section(spec.source, "resources", {"deadline": text})
    resources = dataclasses.replace(spec.resources, deadline=_deadline(res))
    _check_deadline(spec.source, resources, spec.policy.name, spec.stages.enabled)
    return dataclasses.replace(spec, resources=resources)


def _deadline(res: _Section) -> float | None:
    """``[resources] deadline``: a duration (``"2h"``, ``"1h30m"``, ``"90m"``) or seconds."""
    from hpctune.elastic.experiment import PlanningError
    from hpctune.elastic.report import parse_duration

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


def _positive(res: _Section, key: str, rule: str) -> float | None:
    """An optional number > 0 of ``res`` (``None`` when the key is missing)."""
    value = res.get(key, None, "")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise res.must(key, rule, value)
    if not math.isfinite(value):
        raise res.must(key, rule, value)
    return float(value)


def _billing_weight(res: _Section) -> float | str | None:
    """``[resources] billing_weight``: a number > 0, or ``"partition"`` (read from Slurm)."""
    rule = f'a number > 0 (billed units per device-hour) or "{BILLING_FROM_PARTITION}"'
    if res.get("billing_weight", None, "") == BILLING_FROM_PARTITION:
        return BILLING_FROM_PARTITION
    return _positive(res, "billing_weight", rule)


def _profile_path(res: _Section, source: Path) -> Path | None:
    """``[resources] profile``: the planner's profile, relative to the study.toml's folder."""
    if "profile" not in res.table:
        return None
    text = res.string("profile")
    return Path(os.path.abspath(source.parent / Path(text).expanduser()))


def _check_deadline(source: Path, resources: ResourcesSpec, policy: str, stages: bool) -> None:
    """Refuse a deadline the controller cannot follow (its policy, stage trees, worker size)."""
    from hpctune.elastic.experiment import POLICIES_PLANNED

    if policy not in POLICIES_PLANNED:
        raise StudySpecError(
            source,
            "policy.name",
            f"`resources.deadline` needs a policy whose rungs are known in advance "
            f"({', '.join(POLICIES_PLANNED)}), but [policy] name is {policy!r}; set "
            '[policy] name = "sha" (or "hyperband", "asha"), or remove resources.deadline',
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


def _choice(section: _Section, key: str, default: str, choices: tuple[str, ...]) -> str:
    value = section.get(key, default, "")
    if value not in choices:
        raise section.must(key, " or ".join(f'"{c}"' for c in choices), value)
    return str(value)


def _metric_bounds(study: _Section) -> tuple[float, float]:
    value = study.get("metric_bounds", [0.0, 1.0], "")
    ok = (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
        and math.isfinite(value[0])
        and math.isfinite(value[1])
        and value[0] < value[1]
    )
    if not ok:
        raise study.must(
            "metric_bounds",
            "two finite numbers [low, high] with low < high",
            value,
            "e.g. metric_bounds = [0.0, 1.0] for an accuracy",
        )
    return float(value[0]), float(value[1])


def _component(data: Mapping[str, Any], key: str, default: str, path: Path) -> ComponentSpec:
    table = _table(data, key, path, False)
    name = table.get("name", default)
    if not isinstance(name, str):
        raise StudySpecError(
            path, f"{key}.name", f"`{key}.name` must be a string, but got {name!r}"
        )
    options = {k: copy.deepcopy(v) for k, v in table.items() if k != "name"}
    return ComponentSpec(name, options)


def _parse_entry_point(text: str, study: _Section) -> EntryPoint:
    target, sep, function = text.rpartition(":")
    form = 'write "train.py:train" (a file next to study.toml) or "package.module:train"'
    if not sep or not target or not _DOTTED_RE.fullmatch(function):
        raise study.must("entry_point", "of the form <file.py or module>:<function>", text, form)
    if target.endswith(".py"):
        file = Path(target).expanduser()
        if not file.is_absolute():
            file = study.path.parent / file
        file = Path(os.path.abspath(file))
        if not file.is_file():
            raise study.error(
                "entry_point",
                f"the file {file} named by `study.entry_point` ({text!r}) does not exist; "
                "relative paths are relative to the study.toml's folder",
            )
        return EntryPoint(file=file, module=None, function=function)
    if not _DOTTED_RE.fullmatch(target):
        raise study.must("entry_point", "of the form <file.py or module>:<function>", text, form)
    return EntryPoint(file=None, module=target, function=function)


def _parse_directory(
    study: _Section, name: str, override: str | Path | None, now: datetime | None
) -> Path:
    if override is not None:
        template, base = str(override), Path.cwd()
    else:
        template = study.string("directory", DEFAULT_DIRECTORY)
        base = study.path.parent
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    values = {"name": name, "timestamp": stamp}

    def fill(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise study.error(
                "directory",
                f"unknown placeholder {{{key}}} in {template!r}; valid placeholders: "
                "{name}, {timestamp}",
            )
        return values[key]

    path = Path(re.sub(r"\{([^{}]*)\}", fill, template)).expanduser()
    if not path.is_absolute():
        path = base / path
    return Path(os.path.abspath(path))


__all__ = [
    "ComponentSpec",
    "EntryPoint",
    "ResourcesSpec",
    "StudySpec",
    "load_spec",
    "parse_spec",
]


def study_context(spec: StudySpec) -> StudyContext:
    """What the study's policy is built with (:class:`~hpctune.policies.StudyContext`): its
    ``max_steps``, ``mode`` and ``boundary``."""
    return StudyContext(max_steps=spec.max_steps, mode=spec.mode, boundary=spec.boundary)
