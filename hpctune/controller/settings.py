"""The controller's settings from the environment: the ``HPCTUNE_*`` variables a site or a test
sets (the core itself reads none: :class:`~hpctune.core.settings.CoreSettings`)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from hpctune.core.settings import CoreSettings

_DEFAULTS = CoreSettings()


def env_setting(
    name: str,
    default: float,
    *,
    allow_inf: bool = False,
    environ: Mapping[str, str] | None = None,
) -> float:
    """A number of the environment variable ``name``: ``default`` when it is unset, not a
    number, negative or NaN, or infinite without ``allow_inf``."""
    env = os.environ if environ is None else environ
    try:
        value = float(env.get(name, default))
    except ValueError:
        return default
    return value if value >= 0 and (allow_inf or math.isfinite(value)) else default


def decision_wait_from_env(environ: Mapping[str, str] | None = None) -> float:
    """``HPCTUNE_DECISION_WAIT`` (seconds a worker waits at a boundary for its step's decision,
    after which it goes on and the decision applies at its next report), else 2."""
    return env_setting("HPCTUNE_DECISION_WAIT", _DEFAULTS.decision_wait, environ=environ)


def replan_drift(environ: Mapping[str, str] | None = None) -> float:
    """The drift that makes the controller re-plan: ``HPCTUNE_REPLAN_DRIFT`` (a share of the
    predicted time, ``inf`` for never), else
    :data:`~hpctune.elastic.follow.REPLAN_DRIFT`."""
    return env_setting(
        "HPCTUNE_REPLAN_DRIFT", _DEFAULTS.replan_drift, allow_inf=True, environ=environ
    )


def settings_from_environment(
    *,
    poll_interval: float = _DEFAULTS.poll_interval,
    worker_timeout: float = _DEFAULTS.worker_timeout,
    startup_timeout: float = _DEFAULTS.startup_timeout,
    decision_wait: float | None = None,
    stop_grace: float | None = None,
    environ: Mapping[str, str] | None = None,
) -> CoreSettings:
    """The core's settings: the ones given, the others from the environment or their defaults.

    ``HPCTUNE_DECISION_WAIT`` (unless ``decision_wait`` is given), ``HPCTUNE_STOP_GRACE``
    (unless ``stop_grace`` is), ``HPCTUNE_ASSIGNMENT_TIMEOUT``, ``HPCTUNE_STORAGE_PATIENCE``,
    ``HPCTUNE_SUBMIT_RETRY_S`` and ``HPCTUNE_REPLAN_DRIFT``, in seconds (the drift a share);
    a value that is not a number, or negative, counts as unset.
    """

    def read(name: str, default: float) -> float:
        return env_setting(name, default, allow_inf=True, environ=environ)

    return CoreSettings(
        poll_interval=poll_interval,
        worker_timeout=worker_timeout,
        startup_timeout=startup_timeout,
        decision_wait=decision_wait_from_env(environ) if decision_wait is None else decision_wait,
        stop_grace=stop_grace or read("HPCTUNE_STOP_GRACE", _DEFAULTS.stop_grace),
        assignment_timeout=read("HPCTUNE_ASSIGNMENT_TIMEOUT", _DEFAULTS.assignment_timeout),
        storage_patience=read("HPCTUNE_STORAGE_PATIENCE", _DEFAULTS.storage_patience),
        submit_retry=env_setting(
            "HPCTUNE_SUBMIT_RETRY_S", _DEFAULTS.submit_retry, environ=environ
        ),
        replan_drift=replan_drift(environ),
    )


__all__ = ["decision_wait_from_env", "env_setting", "replan_drift", "settings_from_environment"]
