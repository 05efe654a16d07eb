"""The policy's view of the study, kept up to date from the study record.

A view is read-only, as the policy contract says (:class:`~hpctune.policies.StudyView`): its
trials and predictions are read-only mappings and the trials' curves read-only arrays, so a
policy that tries to change them fails at once instead of changing the controller's record.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from hpctune.journal.entities import TrialRecord
from hpctune.policies import StudyView, TrialView

if TYPE_CHECKING:
    from hpctune.core.hosts import ViewsHost


class Views:
    """Builds the policy's views; a trial's view is rebuilt only when the trial changed.

    Args:
        controller: The core whose study is viewed.
    """

    def __init__(self, controller: ViewsHost) -> None:
        self.c = controller
        self._trial_views: dict[int, tuple[tuple[Any, ...], TrialView]] = {}  # see _trial_view
        self._views: dict[int, TrialView] = {}  # the trials' views, kept up to date by view
        self._open_views: set[int] = set()  # trials whose views are looked at every time
        self._views_t0: float | None = None

    def _trial_view(self, t: TrialRecord, t0: float) -> TrialView:
        """The policy's view of one trial, rebuilt only when the trial changed."""
        key = (
            t.status,
            t.step,
            len(t.curve_steps),
            id(t.curve_values),
            t.checkpoint_row,
            t.priority,
            t.retries,
            t.end_step,
            t.parent_trial,
            id(t.info),
            t0,
        )
        cached = self._trial_views.get(t.trial_id)
        if cached is not None and cached[0] == key:
            return cached[1]
        view = TrialView(
            trial_id=t.trial_id,
            status=t.status,
            params=t.params,
            step=t.step,
            steps=_read_only(t.curve_steps, np.int64),
            values=_read_only(t.curve_values, float),
            times=_read_only(t.curve_times, float, minus=t0),
            checkpoint_step=self.c.state.checkpoint_step(t.trial_id),
            parent_trial=t.parent_trial,
            parent_step=t.parent_step,
            priority=t.priority,
            retries=t.retries,
            info=t.info,
            end_step=t.end_step,
            generation=t.generation,
            initiator=t.initiator,
            last_metrics=dict(t.last_metrics),
        )
        self._trial_views[t.trial_id] = (key, view)
        return view

    def view(self, free_slots: int = 0) -> StudyView:
        """The policy's view; trials are looked at again only when the study record says they
        changed or they have not ended (a study of many ended trials costs little)."""
        c = self.c
        state = c.state
        t0 = state.started_time or state.created_time
        if t0 != self._views_t0:
            self._views_t0, self._views = t0, {}
            self._open_views = set(state.trials)
        changed, state.changed = state.changed, set()
        for tid in sorted(changed | self._open_views):  # new trials come last: id order
            view = self._trial_view(state.trials[tid], t0)
            self._views[tid] = view
            if view.status.is_final:
                self._open_views.discard(tid)
            else:
                self._open_views.add(tid)
        spec = c.spec
        return StudyView(
            metric=spec.metric,
            mode=spec.mode,
            max_steps=spec.max_steps,
            boundary=spec.boundary,
            now=c.clock.now() - t0,
            trials=MappingProxyType(dict(self._views)),
            free_slots=free_slots,
            total_slots=c.elastic.pool_size(),
            trials_remaining=max(spec.num_trials - state.generated, 0),
            bounds=spec.metric_bounds,
            random_level=spec.random_level,
            predictions=MappingProxyType(dict(c.curves.predictions)),
            space=spec.space,
            objectives=spec.objectives,
        )


def _read_only(values: Sequence[float], dtype: Any, minus: float = 0.0) -> np.ndarray:
    """A new read-only array of ``values`` (less ``minus``)."""
    array: np.ndarray = np.asarray(values, dtype=dtype)
    if minus:
        array = array - minus
    array.setflags(write=False)
    return array


__all__ = ["Views"]
