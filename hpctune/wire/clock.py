"""One clock for the controller, executors and the simulator (after Syne Tune's TimeKeeper)."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Where the controller reads the time and waits."""

    def now(self) -> float:
        """Seconds since the epoch (real or simulated)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (or advance simulated time)."""
        ...


class RealClock:
    """The wall clock."""

    def now(self) -> float:
        """Return ``time.time()``."""
        return time.time()

    def sleep(self, seconds: float) -> None:
        """Sleep for real."""
        time.sleep(seconds)
