"""Order statistics of sorted values, bit for bit as numpy computes them from unsorted ones.

Policies keep the values they rank in sorted containers and read a percentile or a median in
O(1) or O(log n) instead of sorting (or partitioning) every value at every decision. The
results are those of :func:`numpy.nanpercentile` and :func:`numpy.median` on the same values
(the sign of a zero aside, which ``<`` and ``==`` do not see: numpy's partition may place
``-0.0`` and ``0.0`` in either order).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np


def percentile_of_sorted(values: Sequence[float], q: float) -> float:
    """``np.nanpercentile(values, q)`` (linear interpolation) of NaN-free ascending ``values``.

    O(1) given O(1) indexing: numpy's own steps (``_quantile``: virtual index ``(n - 1) *
    q / 100``, its floor and the next index, clipped to the last value, then ``_lerp``) in
    Python floats, which are the same IEEE doubles. NaN for no values.
    """
    n = len(values)
    if n == 0:
        return math.nan
    virtual = (n - 1) * (q / 100)
    if virtual >= n - 1:  # numpy takes the last value, with the index -1 in gamma
        below, above, base = n - 1, n - 1, -1.0
    elif virtual < 0:
        below, above, base = 0, 0, 0.0
    else:
        base = float(math.floor(virtual))
        below, above = int(base), int(base) + 1
    gamma = virtual - base
    return lerp(float(values[below]), float(values[above]), gamma)


def lerp(a: float, b: float, t: float) -> float:
    """numpy's ``_lerp``: ``a + (b - a) * t``, or ``b - (b - a) * (1 - t)`` for ``t >= 0.5``."""
    diff = b - a
    if t >= 0.5:
        return b - diff * (1 - t)
    return a + diff * t


def median_skipping(at: Callable[[int], float], n: int, skip: int | None = None) -> float:
    """``np.median`` of ascending values ``at(0) .. at(n - 1)`` without the one at ``skip``.

    O(1) calls of ``at``; NaN when no value is left. The middle value (or the mean of the two
    middle ones) is computed by :func:`numpy.median` itself, so the rounding is numpy's.
    """
    m = n - (skip is not None)
    if m <= 0:
        return math.nan

    def get(i: int) -> float:
        return at(i if skip is None or i < skip else i + 1)

    middle = [get(m // 2)] if m % 2 else [get(m // 2 - 1), get(m // 2)]
    return float(np.median(middle))
