"""Deltas of JSON states: what changed in a policy's state between two commits.

A policy's state (``Policy.state_dict``) can grow with the study (ASHA's rung values, the trials
a bracket holds); journaling it whole at every change made each commit cost as much as the
state. The controller journals a ``policy_delta`` record instead, a patch of the JSON state:

- for an object: ``{"set": {key: value}, "del": [key, ...], "sub": {key: patch}}``: keys added
  or replaced, keys removed, and values patched in place;
- for a list no shorter than before: ``{"set": {index: value}, "sub": {index: patch},
  "ext": [value, ...]}``: items replaced, items patched, and items appended (the common case of
  states that only grow, such as the values recorded at a rung);
- anything else (a number, a shorter list) is replaced whole by its parent's ``set``.

Applying the patches in journal order to the last whole ``policy_state`` gives the state, so
readers stay linear in what the journal holds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def state_delta(old: Mapping[Any, Any], new: Mapping[Any, Any]) -> dict[str, Any]:
    """The patch that turns ``old`` into ``new`` (empty when equal).

    Keys may be of any type JSON turns into text (``3`` → ``"3"``): the patch names them as the
    journal will, so it applies to the JSON form of ``old``. Tuples count as lists.
    """
    patch: dict[str, Any] = {}
    replaced: dict[str, Any] = {}
    sub: dict[str, Any] = {}
    for key, value in new.items():
        if key in old and old[key] == value:
            continue
        inner = _patch(old[key], value) if key in old else None
        if inner is None:
            replaced[_key(key)] = value
        else:
            sub[_key(key)] = inner
    removed = [_key(k) for k in old if k not in new]
    if replaced:
        patch["set"] = replaced
    if removed:
        patch["del"] = removed
    if sub:
        patch["sub"] = sub
    return patch


def _patch(old: Any, new: Any) -> dict[str, Any] | None:
    """A patch of ``old`` into ``new`` when both are objects, or lists the new one no shorter;
    ``None``: replace the value whole."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        return state_delta(old, new)
    if not (_is_list(old) and _is_list(new)) or len(new) < len(old):
        return None
    n = len(old)
    patch: dict[str, Any] = {}
    if list(new[:n]) != list(old):  # items changed in place (rare: states mostly grow)
        replaced: dict[str, Any] = {}
        sub: dict[str, Any] = {}
        for i in range(n):
            if old[i] == new[i]:
                continue
            inner = _patch(old[i], new[i])
            if inner is None:
                replaced[str(i)] = new[i]
            else:
                sub[str(i)] = inner
        if replaced:
            patch["set"] = replaced
        if sub:
            patch["sub"] = sub
    if len(new) > n:
        patch["ext"] = list(new[n:])
    return patch


def _is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def _key(key: Any) -> str:
    """A key as JSON writes it (``True`` → ``"true"``, ``3`` → ``"3"``)."""
    return key if isinstance(key, str) else json.dumps(key)


def apply_delta(state: Any, patch: Mapping[str, Any]) -> Any:
    """``state`` (an object or a list) with ``patch`` applied, as a new value (``state`` is left
    as it is)."""
    if isinstance(state, list):
        items = list(state)
        for index, value in patch.get("set", {}).items():
            items[int(index)] = value
        for index, inner in patch.get("sub", {}).items():
            items[int(index)] = apply_delta(items[int(index)], inner)
        items.extend(patch.get("ext", ()))
        return items
    result = dict(state) if isinstance(state, dict) else {}
    for key in patch.get("del", ()):
        result.pop(key, None)
    result.update(patch.get("set", {}))
    for key, inner in patch.get("sub", {}).items():
        current = result.get(key)
        result[key] = apply_delta(current if isinstance(current, dict | list) else {}, inner)
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
