"""The scheduling core's settings: its timings, given whole when the core is built.

The core reads no environment variable: the controller of a study directory reads the
``HPCTUNE_*`` ones (:func:`hpctune.controller.settings.settings_from_environment`), the
simulator gives its own (:meth:`CoreSettings.in_memory`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hpctune.elastic.follow import REPLAN_DRIFT

#: Seconds a worker waits at a boundary for its step's decision (``HPCTUNE_DECISION_WAIT``).
DECISION_WAIT = 2.0


@dataclass(frozen=True)
class CoreSettings:
    """How long the scheduling core waits for what, in seconds of its clock.

    Attributes:
        poll_interval: Between two iterations of :meth:`~hpctune.core.SchedulingCore.run`.
        worker_timeout: A worker whose heartbeat is older than this is lost.
        startup_timeout: A worker with no heartbeat this long after its start is lost.
        decision_wait: A worker waits this long at a boundary for its step's decision
            (policies that decide at boundaries; ``HPCTUNE_DECISION_WAIT``).
        stop_grace: A segment told to stop or suspend has this long to comply before its
            worker is cancelled (``HPCTUNE_STOP_GRACE``).
        assignment_timeout: An assignment or a decision not taken by an idle worker is written
            again after this long (``HPCTUNE_ASSIGNMENT_TIMEOUT``).
        storage_patience: Writes that keep failing this long (a full disk) stop the controller
            (``HPCTUNE_STORAGE_PATIENCE``; no trial fails).
        submit_retry: The wait after a first failed submission of workers; it doubles with
            every failure in a row (``HPCTUNE_SUBMIT_RETRY_S``).
        replan_drift: A stage of an elastic plan that ends later than predicted by more than
            this share of the prediction makes the core plan again (``HPCTUNE_REPLAN_DRIFT``;
            ``inf``: never).
    """

    poll_interval: float = 0.1
    worker_timeout: float = 60.0
    startup_timeout: float = 300.0
    decision_wait: float = DECISION_WAIT
    stop_grace: float = 300.0
    assignment_timeout: float = 30.0
    storage_patience: float = 600.0
    submit_retry: float = 10.0
    replan_drift: float = REPLAN_DRIFT

    @classmethod
    def in_memory(
        cls,
        *,
        decision_wait: float = DECISION_WAIT,
        worker_timeout: float = math.inf,
        startup_timeout: float = math.inf,
    ) -> CoreSettings:
        """The settings of a study that exists only in memory (the simulator's): no wait
        between iterations, and nothing timed out that simulated workers cannot cause (a worker
        is lost by its heartbeat only when ``worker_timeout`` or ``startup_timeout`` say so)."""
        return cls(
            poll_interval=0.0,
            worker_timeout=worker_timeout,
            startup_timeout=startup_timeout,
            decision_wait=decision_wait,
            stop_grace=math.inf,
            assignment_timeout=math.inf,
            storage_patience=math.inf,
        )


__all__ = ["DECISION_WAIT", "CoreSettings"]
