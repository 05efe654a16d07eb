"""The scheduling core's parts reach the core only through their narrow interfaces
(hpctune/core/hosts.py), and the core package does not reach the controller's files."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import hpctune.core as core_package
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
    "ingest": hosts.IngestHost,
    "pool": hosts.PoolHost,
    "curves": hosts.CurvesHost,
    "commands": hosts.CommandsHost,
    "elastic": hosts.ElasticHost,
    "scheduling": hosts.SchedulingHost,
    "stages": hosts.SchedulingHost,
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
    assert not imported & {"SchedulingCore", "CoreBase", "Controller"}


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
