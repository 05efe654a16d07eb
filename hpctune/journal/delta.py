"""Deltas of JSON states: what changed in a policy's state between two commits.

A policy's state (``Policy.state_dict``) can grow with the study (ASHA's rung values, the trials
a bracket holds); journaling it whole at every change made each commit cost as much as the
state. The controller journals a ``policy_delta`` record instead, a patch of the JSON state:

- ``{"set": {key: value}, "del": [key, ...], "sub": {key: patch}}`` for an object: keys added or
  replaced, keys removed, and nested objects patched;
- any other value (a list, a number) is replaced whole when it changes.

Applying the patches in journal order to the last full ``policy_state`` gives the state, so
readers stay linear in what the journal holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def state_delta(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The patch that turns ``old`` into ``new`` (JSON objects; empty when equal)."""
    patch: dict[str, Any] = {}
    changed = {k: v for k, v in new.items() if k not in old or old[k] != v}
    sub = {
        k: state_delta(old[k], v)
        for k, v in changed.items()
        if isinstance(v, dict) and isinstance(old.get(k), dict)
    }
    replaced = {k: v for k, v in changed.items() if k not in sub}
    removed = [k for k in old if k not in new]
    if replaced:
        patch["set"] = replaced
    if removed:
        patch["del"] = removed
    if sub:
        patch["sub"] = sub
    return patch


def apply_delta(state: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """``state`` with ``patch`` applied (a new object; ``state`` is left as it is)."""
    result = dict(state)
    for key in patch.get("del", ()):
        result.pop(key, None)
    result.update(patch.get("set", {}))
    for key, sub in patch.get("sub", {}).items():
        inner = result.get(key)
        result[key] = apply_delta(inner if isinstance(inner, dict) else {}, sub)
    return result


def policy_states(
    records: Iterable[tuple[float, str, dict[str, Any]]],
) -> list[tuple[float, dict[str, Any]]]:
    """The policy's state after each ``policy_state`` or ``policy_delta`` record, as ``(time,
    state)``, from log records ``(time, kind, data)`` in journal order (other kinds ignored)."""
    out: list[tuple[float, dict[str, Any]]] = []
    state: dict[str, Any] = {}
    for time, kind, data in records:
        if kind == "policy_state":
            state = data.get("state") or {}
        elif kind == "policy_delta":
            state = apply_delta(state, data.get("delta") or {})
        else:
            continue
        out.append((time, state))
    return out


__all__ = ["apply_delta", "policy_states", "state_delta"]
