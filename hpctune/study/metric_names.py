"""Metric names: which names a training function may report, and the safe key each is stored under.

Any text a user may type is a metric name (``loss/val``, ``val.acc``, ``top 1``, ``précision``);
the journal keeps the real name and stores the values under a key that is safe as a zarr array
name and a file name (:func:`metric_key`). Kept free of heavy imports: workers check names in
``ctx.report``.
"""

from __future__ import annotations

import hashlib
import re

MAX_METRIC_NAME = 200  # characters
_PLAIN_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")


def metric_name_problem(name: object) -> str:
    """Why ``name`` cannot be a metric name (``""`` when it can).

    Any text a user may type is allowed (``loss/val``, ``val.acc``, spaces, unicode): it is
    stored under a safe key (:func:`metric_key`). Refused: non-strings, empty or blank names
    and names over :data:`MAX_METRIC_NAME` characters.
    """
    if not isinstance(name, str):
        return f"a metric name must be a string, but got {type(name).__name__} {name!r}"
    if not name.strip():
        return f"a metric name must not be empty or blank, but got {name!r}"
    if len(name) > MAX_METRIC_NAME:
        return (
            f"a metric name must be at most {MAX_METRIC_NAME} characters, but "
            f"{name[:40]!r}... has {len(name)}"
        )
    return ""


def metric_key(name: str, taken: set[str]) -> str:
    """The array name under ``metrics/values/`` for a new metric ``name``.

    A plain name (letters, digits, ``_.-``, at most 100 characters, starting with a letter or
    digit) is its own key, as in journals written before keys existed; any other name gets
    ``m-`` and 16 hex digits of its SHA-256. ``taken`` (the keys in use) settles collisions.
    """
    key = name
    if not _PLAIN_KEY.fullmatch(name):
        key = "m-" + hashlib.sha256(name.encode()).hexdigest()[:16]
    base, n = key, 1
    while key in taken:
        n += 1
        key = f"{base}-{n}"
    return key
