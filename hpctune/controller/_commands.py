"""The controller's side of ask/tell and added trials (commands in :mod:`hpctune.wire.asktell`)."""

from __future__ import annotations

import logging
import math
from functools import partial
from typing import Any

from hpctune.controller._base import ControllerBase
from hpctune.journal import state as st
from hpctune.study.seeding import component_seed, index_rng, trial_seed
from hpctune.wire.asktell import complete_params
from hpctune.wire.states import StudyState, TrialStatus

logger = logging.getLogger(__name__)

_TELL_STATUS = {
    "completed": TrialStatus.COMPLETED,
    "terminated": TrialStatus.TERMINATED,
    "failed": TrialStatus.FAILED,
}


class TrialCommandsController(ControllerBase):
    """Carry out ``add_trials``, ``ask`` and ``tell`` (each checked by its validator first)."""

    def _trial_command(self, command: dict[str, Any]) -> None:
        """Carry out an inbox command of one of these kinds (its validator accepted it)."""
        kind = str(command["command"])
        if kind == "add_trials":
            self._add_trials(command["params"])
        elif kind == "ask":
            self._ask(str(command["request"]))
        else:
            self._tell(command)

    def _external_running(self) -> bool:
        """True while an asked trial waits to be told (the study must not end)."""
        return any(
            t.info.get("external") and not t.status.is_final for t in self.state.trials.values()
        )

    def _ask_tell_only_done(self) -> bool:
        """A study without workers (``slots = 0``) is done once the generator has created
        every trial and all have been told."""
        if self.state.generated < self.spec.num_trials:
            return False
        return all(t.status.is_final for t in self.state.trials.values())

    def _reopen(self, reason: str) -> None:
        """A finished or stopped study runs again (trials were added or asked for)."""
        if self.state.state in (StudyState.FINISHED, StudyState.STOPPED):
            self._set_study(StudyState.RUNNING, reason)

    def _add_trials(self, configs: list[dict[str, Any]]) -> None:
        seed = component_seed(self.spec.seed, "enqueued")
        for given in configs:
            trial_id = len(self.state.trials)
            params = complete_params(self.spec.space, given, index_rng(seed, trial_id))
            self._log(
                st.TRIAL_CREATED,
                trial=trial_id,
                params=params,
                seed=trial_seed(self.spec.seed, trial_id),
                info={"enqueued": True},
            )
            logger.info("trial %d added by the user: %s", trial_id, params)
        self._reopen(f"{len(configs)} trial(s) added")

    def _ask(self, request: str) -> None:
        index = self.state.generated
        trial_id = len(self.state.trials)
        proposal = self._propose(index, self._view())
        info = {**proposal.info, "external": True, "request": request}
        self._log(
            st.TRIAL_CREATED,
            trial=trial_id,
            params=proposal.params,
            generator_index=index,
            seed=trial_seed(self.spec.seed, trial_id),
            info=info,
        )
        self._set_trial(self.state.trials[trial_id], TrialStatus.RUNNING, "asked")
        self._reopen("a trial was asked for")
        answer = {"trial": trial_id, "params": proposal.params}
        self._outbox.append(partial(self.wire.write_answer, request, answer))
        logger.info("trial %d asked for (%s): %s", trial_id, request, proposal.params)

    def _tell(self, command: dict[str, Any]) -> None:
        trial = self.state.trials[int(command["trial"])]
        step = int(command.get("step", self.spec.max_steps))
        metrics = {k: float(v) for k, v in command.get("values", {}).items()}
        now = self.clock.now()
        if metrics:
            self.writer.append_metrics(trial.trial_id, -1, step, now, metrics)
            value = metrics.get(self.spec.metric)
            ok = value is not None and not math.isnan(value)
            self.state.add_report(trial.trial_id, step, now, value if ok else None, metrics)
        else:
            trial.step = step
        self._dirty = True
        state = str(command.get("state", "completed"))
        if state in _TELL_STATUS:
            self._set_trial(trial, _TELL_STATUS[state], "told")


__all__ = ["TrialCommandsController"]
