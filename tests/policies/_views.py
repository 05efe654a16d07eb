"""Hand-made study views for policy tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hpctune.policies import StudyContext, StudyView, TrialView
from hpctune.study.states import Mode, TrialStatus


def trial(
    trial_id: int,
    values: Sequence[float],
    status: TrialStatus = TrialStatus.RUNNING,
    *,
    first_step: int = 1,
    step: int | None = None,
) -> TrialView:
    """A trial that reported ``values`` at steps ``first_step, first_step + 1, ...``."""
    steps = np.arange(first_step, first_step + len(values), dtype=np.int64)
    last = int(steps[-1]) if len(steps) else 0
    return TrialView(
        trial_id=trial_id,
        status=status,
        params={"id": trial_id},
        step=last if step is None else step,
        steps=steps,
        values=np.asarray(values, dtype=float),
        times=steps.astype(float),
    )


def context(max_steps: int = 9, *, mode: Mode = "max", boundary: int = 1) -> StudyContext:
    """The context a policy is built with for a study of :func:`view`'s defaults."""
    return StudyContext(max_steps=max_steps, mode=mode, boundary=boundary)


def view(
    trials: Sequence[TrialView],
    *,
    mode: str = "max",
    max_steps: int = 9,
    free: int = 0,
    remaining: int | None = 0,
    slots: int = 4,
) -> StudyView:
    """A study view of ``trials``."""
    return StudyView(
        metric="acc",
        mode=mode,
        max_steps=max_steps,
        boundary=1,
        now=0.0,
        trials={t.trial_id: t for t in trials},
        free_slots=free,
        total_slots=slots,
        trials_remaining=remaining,
    )


RNG = np.random.default_rng(0)
