"""matplotlib for every ``--plot``: one import that fails with exit 2 and the pip command, and
the metric axis every plot of a study uses."""

from __future__ import annotations

import math
from typing import Any

from hpctune.errors import UsageError

INSTALL = "pip install 'hpctune[report]'"


def pyplot() -> Any:
    """Return ``matplotlib.pyplot`` with the non-interactive Agg backend.

    Raises:
        UsageError: matplotlib is not installed (exit 2; the message gives the pip command).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise UsageError(
            f"plotting needs matplotlib, which is not installed ({exc}); install it with: "
            f"{INSTALL}"
        ) from None
    return plt


def metric_scale(ax: Any, values: list[float], mode: str) -> None:
    """Log scale for a loss spanning more than a decade; else the values' range (the worst 2 %
    cut when there are many), so the interesting range is not squashed."""
    v = sorted(x for x in values if x is not None and math.isfinite(x))
    if not v:
        return
    if mode == "min" and v[0] > 0 and v[-1] / v[0] > 10:
        ax.set_yscale("log")
        return
    cut = 0.02 if len(v) >= 1000 else 0.0
    lo = v[int(cut * (len(v) - 1))] if mode == "max" else v[0]
    hi = v[-1] if mode == "max" else v[int((1 - cut) * (len(v) - 1))]
    pad = (hi - lo) * 0.05 or abs(hi) * 0.05 or 0.1
    ax.set_ylim(lo - pad, hi + pad)


__all__ = ["INSTALL", "metric_scale", "pyplot"]
