"""Plug-ins: what hpctune finds by name, its own parts and other packages' alike.

Each kind of plug-in is a group of Python entry points (``pyproject.toml`` of the package that
brings it)::

    [project.entry-points."hpctune.backends"]
    pbs = "hpctune_pbs:PbsBackend"

Backends, policies, generators, curve models and export formats are looked up here, so a
third-party one needs no edit inside ``hpctune/``; where a name is asked for, an importable
``MODULE:CLASS`` works too. hpctune's own backends are listed by name below and imported only
when asked for (the low layers that look them up must not import the high ones that hold them,
docs/architecture.md "Layers").
"""

from __future__ import annotations

import difflib
import importlib
import re
from collections.abc import Mapping
from importlib import metadata
from typing import Any

from hpctune.errors import UsageError

#: The entry-point group of each kind of plug-in.
GROUPS: Mapping[str, str] = {
    "backend": "hpctune.backends",
    "policy": "hpctune.policies",
    "generator": "hpctune.generators",
    "curve model": "hpctune.curve_models",
    "export format": "hpctune.exports",
}

#: hpctune's own backends, imported when asked for (``MODULE:ATTRIBUTE``).
BUILTIN_BACKENDS: Mapping[str, str] = {
    "local": "hpctune.backends.local:LocalBackend",
    "slurm": "hpctune.slurm.backend:SlurmBackend",
}

_REFERENCE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


class PluginError(UsageError):
    """A plug-in is unknown or cannot be loaded (exit 2): the message names it and the fix."""


def is_reference(text: str) -> bool:
    """Whether ``text`` is an importable ``MODULE:ATTRIBUTE`` rather than a registered name."""
    return bool(_REFERENCE.fullmatch(text))


def load_reference(text: str, kind: str) -> Any:
    """Import ``MODULE:ATTRIBUTE`` (attributes may be dotted) and return the object.

    Raises:
        PluginError: The module cannot be imported or has no such attribute.
    """
    module_name, _, attribute = text.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise PluginError(
            f"the {kind} {text!r}: cannot import {module_name!r} ({exc}); install its package "
            "or put its folder on PYTHONPATH"
        ) from exc
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise PluginError(f"the {kind} {text!r}: {module_name} has no {attribute!r}")
        obj = getattr(obj, part)
    return obj


def entry_points(kind: str) -> dict[str, metadata.EntryPoint]:
    """The entry points other packages (and hpctune) registered for ``kind``, by name."""
    return {ep.name: ep for ep in metadata.entry_points(group=GROUPS[kind])}


def registered(kind: str, builtin: Mapping[str, Any]) -> list[str]:
    """Every name of ``kind``: ``builtin`` first, then other packages' entry points."""
    return [*builtin, *sorted(set(entry_points(kind)) - set(builtin))]


def find(kind: str, name: str, builtin: Mapping[str, Any]) -> Any:
    """The plug-in ``name`` of ``kind``: one of ``builtin`` (an object, or a ``MODULE:ATTR``
    text imported now), an entry point, or an importable ``MODULE:ATTRIBUTE``.

    Raises:
        PluginError: Unknown (with the known names and a close match), or it fails to load.
    """
    if name in builtin:
        found = builtin[name]
        return load_reference(found, kind) if isinstance(found, str) else found
    points = entry_points(kind)
    if name in points:
        try:
            return points[name].load()
        except Exception as exc:
            raise PluginError(
                f"the {kind} {name!r} (entry point {points[name].value} of "
                f"{GROUPS[kind]}) fails to load: {type(exc).__name__}: {exc}"
            ) from exc
    if is_reference(name):
        return load_reference(name, kind)
    known = registered(kind, builtin)
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise PluginError(
        f"unknown {kind} {name!r}; {hint}known {plural(kind)}: {', '.join(known)} (or an "
        f"importable MODULE:CLASS, or a package registering the entry point group "
        f"{GROUPS[kind]})"
    )


def find_class(kind: str, name: str, builtin: Mapping[str, Any], base: type) -> type:
    """:func:`find`, for plug-ins that are classes deriving from ``base`` (a
    :class:`hpctune.policies.Policy`, a :class:`hpctune.policies.generators.Generator`).

    Raises:
        PluginError: Unknown, it fails to load, or it is not a subclass of ``base``.
    """
    found = find(kind, name, builtin)
    if not (isinstance(found, type) and issubclass(found, base)):
        raise PluginError(
            f"the {kind} {name!r} is {describe(found)}, not a {base.__name__} subclass; a "
            f"{kind} is a class deriving from {base.__module__}.{base.__qualname__}"
        )
    return found


def describe(obj: Any) -> str:
    """What ``obj`` is, for an error message: ``the class X``, ``the function f``, ``a dict``."""
    if isinstance(obj, type):
        return f"the class {obj.__module__}.{obj.__qualname__}"
    if callable(obj) and hasattr(obj, "__qualname__"):
        return f"the function {obj.__qualname__}"
    return f"a {type(obj).__name__}"


def plural(kind: str) -> str:
    """The plural of a kind of plug-in (``policies``, ``curve models``)."""
    return f"{kind[:-1]}ies" if kind.endswith("y") else f"{kind}s"


def backend(name: str) -> Any:
    """The backend ``name``: an instance of its class (a :class:`hpctune.backends.Backend`).

    Raises:
        PluginError: Unknown, or it fails to load.
    """
    return find("backend", name, BUILTIN_BACKENDS)()


def backend_names() -> list[str]:
    """Every registered backend: hpctune's own, then other packages'."""
    return registered("backend", BUILTIN_BACKENDS)


def backend_sections() -> dict[str, Any]:
    """The study.toml sections that backends own (``{"slurm": <the slurm backend>}``), each
    checked by its backend's ``parse_options``."""
    out: dict[str, Any] = {}
    for name in backend_names():
        found = backend(name)
        section = getattr(found, "section", None)
        if section:
            out[section] = found
    return out
