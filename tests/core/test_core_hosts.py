"""The scheduling core is one class composed of parts that reach it only through their narrow
interfaces (hpctune/core/hosts.py); the controller and the simulator hold a core instead of
being one, and the core package reaches no file, no environment variable and no controller."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import hpctune.core as core_package
from hpctune.controller import Controller
from hpctune.core import hosts
from hpctune.core.loop import SchedulingCore
from hpctune.journal.memory import MemoryJournal
from hpctune.policies import make_policy
from hpctune.simulator import Simulator, simulation_context
from hpctune.simulator.traces import Trace
from tests.conftest import REPO

CORE = Path(core_package.__file__).parent

#: Each part's module, and the protocol its constructor is typed with.
PARTS = {
    "actions": hosts.ActionsHost,
    "commands": hosts.CommandsHost,
    "curves": hosts.CurvesHost,
    "elastic": hosts.ElasticHost,
    "inbox": hosts.InboxHost,
    "ingest": hosts.IngestHost,
    "policy_state": hosts.PolicyStateHost,
    "pool": hosts.PoolHost,
    "scheduling": hosts.SchedulingHost,
    "stages": hosts.SchedulingHost,
    "storage": hosts.StorageHost,
    "views": hosts.ViewsHost,
}


def protocol_members(protocol: type) -> set[str]:
    """The names a protocol lists (its attributes and methods, its bases' included)."""
    names: set[str] = set()
    for klass in protocol.__mro__:
        if klass is object or not getattr(klass, "_is_protocol", False):
            continue
        names |= set(getattr(klass, "__annotations__", {}))
        names |= {
            name
            for name, value in vars(klass).items()
            if not name.startswith("_") and (callable(value) or isinstance(value, property))
        }
    return names


def core_uses(source: str) -> set[str]:
    """The attributes read or called on the core in a part's source: ``self.c.X`` and
    ``c.X`` where ``c = self.c``."""
    tree = ast.parse(source)
    aliases = {"c"}
    used: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        value = node.value
        on_self_c = (
            isinstance(value, ast.Attribute)
            and value.attr == "c"
            and isinstance(value.value, ast.Name)
            and value.value.id == "self"
        )
        if on_self_c or (isinstance(value, ast.Name) and value.id in aliases):
            used.add(node.attr)
    return used


def test_the_check_finds_what_a_part_uses() -> None:
    """The source check can fail: it sees a private member reached through ``self.c``."""
    source = "class P:\n    def f(self):\n        self.c._outbox.append(1)\n        c = self.c\n"
    source += "        c.state.trials\n"
    assert core_uses(source) == {"_outbox", "state"}


@pytest.mark.parametrize("module", sorted(PARTS))
def test_a_part_uses_only_its_protocol(module: str) -> None:
    """Every member a part uses of the core is listed by its protocol (mypy checks the same
    on types; this names the member if a part is changed without mypy)."""
    source = (CORE / f"{module}.py").read_text()
    protocol = PARTS[module]
    used = core_uses(source)
    used.discard("startswith")  # a local string named c in stages.py
    assert used, f"{module}.py uses nothing of the core: the check is broken"
    missing = sorted(used - protocol_members(protocol))
    assert missing == [], f"{module}.py uses {missing}, not in {protocol.__name__}"
    assert f"controller: {protocol.__name__}" in source


@pytest.mark.parametrize("module", sorted(PARTS))
def test_a_part_does_not_import_the_core_class(module: str) -> None:
    tree = ast.parse((CORE / f"{module}.py").read_text())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert not imported & {"SchedulingCore", "Controller"}


def test_the_core_package_does_not_import_the_controller_side() -> None:
    """The core reaches files only through what it is given: nothing in ``hpctune/core``
    imports ``hpctune.controller`` (the study directory's wire, the launcher)."""
    for path in sorted(CORE.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith("hpctune.controller"), path.name
            if isinstance(node, ast.Import):
                assert all(not a.name.startswith("hpctune.controller") for a in node.names)


def test_every_part_is_checked() -> None:
    """A new part of the core (a module whose class takes the core as ``controller``) is in
    PARTS, so the checks above see it."""
    init = re.compile(r"def __init__\(\s*self,\s*controller: ")
    parts = {path.stem for path in CORE.glob("*.py") if init.search(path.read_text())}
    assert parts == set(PARTS)


def test_the_core_is_composed_not_inherited() -> None:
    """The core is one class; the controller and the simulator hold one (``core``,
    ``controller``) rather than extend it."""
    assert SchedulingCore.__bases__ == (object,)
    assert not issubclass(Controller, SchedulingCore)
    assert not issubclass(Simulator, SchedulingCore)


HOLDERS = ["controller/directory.py", "simulator/_engine.py", "testing"]


def held_core_assignments(source: str) -> list[str]:
    """Attributes set on a held core after it was built: ``X.core.attr = ...`` or
    ``X.controller.attr = ...`` (the controller's and the simulator's names for it)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Attribute)
                and target.value.attr in ("core", "controller")
            ):
                found.append(f"{target.value.attr}.{target.attr}")
    return found


def test_the_check_finds_an_attribute_set_on_a_held_core() -> None:
    source = "def f(sim):\n    sim.controller.storage_patience = 1.0\n    sim.clock = 2\n"
    assert held_core_assignments(source) == ["controller.storage_patience"]


@pytest.mark.parametrize("where", HOLDERS)
def test_nothing_sets_attributes_on_a_core_after_it_is_built(where: str) -> None:
    """What a core needs (its settings included) is given to its constructor."""
    root = CORE.parent / where
    paths = [root] if root.is_file() else sorted(root.glob("*.py"))
    assert paths
    for path in paths:
        assert held_core_assignments(path.read_text()) == [], path.name


FORBIDDEN_IN_CORE = re.compile(
    r"os\.environ|\bgetenv\b|\.mkdir\(|\bmakedirs\b|shutil\.which|(?<![\w.])open\("
)


def test_the_core_reads_no_environment_and_makes_no_directory() -> None:
    """Environment variables are read by the controller (its settings), directories made by
    the wire and the controller's curve service."""
    for path in sorted(CORE.glob("*.py")):
        found = FORBIDDEN_IN_CORE.findall(path.read_text())
        assert found == [], f"{path.name} uses {found}"


def test_the_check_finds_environment_and_files() -> None:
    source = "x = os.environ['A']; p.mkdir(); open(f); shutil.which('sbatch'); self._reopen()"
    assert FORBIDDEN_IN_CORE.findall(source) == ["os.environ", ".mkdir(", "open(", "shutil.which"]


def test_a_core_in_memory_has_every_member_its_parts_are_promised() -> None:
    """The core built for the simulator satisfies every part's protocol."""
    trace = Trace.load(REPO / "benchmarks" / "traces" / "digits.h5").subset([0, 1, 2, 3])
    sim = Simulator(trace, make_policy("asha", {}, simulation_context(trace)), slots=2)
    sim.run()
    built = sim.controller
    assert isinstance(built, SchedulingCore)
    assert isinstance(built.writer, MemoryJournal)
    for protocol in {*PARTS.values(), hosts.Journaling}:
        for name in sorted(protocol_members(protocol)):
            assert hasattr(built, name), f"the core lacks {protocol.__name__}.{name}"
            if callable(getattr(protocol, name, None)) and not isinstance(
                getattr(protocol, name), property
            ):
                assert inspect.signature(getattr(built, name)).parameters.keys() == (
                    inspect.signature(getattr(protocol, name)).parameters.keys() - {"self"}
                ), f"{protocol.__name__}.{name} differs from the core's"
