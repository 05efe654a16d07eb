"""The controller's side of ask/tell and added trials (commands in :mod:`hpctune.wire.asktell`)."""

from __future__ import annotations

import logging
import math
from functools import partial
from typing import TYPE_CHECKING, Any

from hpctune.journal import records as rec
from hpctune.study.seeding import component_seed, index_rng, trial_seed
from hpctune.study.states import StudyState, TrialStatus
from hpctune.wire.asktell import complete_params

if TYPE_CHECKING:
    from hpctune.core.hosts import CommandsHost

logger = logging.getLogger(__name__)

_TELL_STATUS = {
    "completed": TrialStatus.COMPLETED,
    "terminated": TrialStatus.TERMINATED,
    "failed": TrialStatus.FAILED,
}


class TrialCommands:
    """Carry out ``add_trials``, ``ask`` and ``tell`` (each checked by its validator first).

    Args:
        controller: The controller whose study the trials join.
    """

    def __init__(self, controller: CommandsHost) -> None:
        self.c = controller

    def carry_out(self, command: dict[str, Any]) -> None:
        """Carry out an inbox command of one of these kinds (its validator accepted it)."""
        kind = str(command["command"])
        if kind == "add_trials":
            self._add_trials(command["params"])
        elif kind == "ask":
            self._ask(str(command["request"]))
        else:
            self._tell(command)

    def external_running(self) -> bool:
        """True while an asked trial waits to be told (the study must not end)."""
        return any(
            t.info.get("external") and not t.status.is_final for t in self.c.state.trials.values()
        )

    def ask_tell_only_done(self) -> bool:
        """A study without workers (``slots = 0``) is done once the generator has created
        every trial and all have been told."""
        if self.c.state.generated < self.c.spec.num_trials:
            return False
        return all(t.status.is_final for t in self.c.state.trials.values())

    def _reopen(self, reason: str) -> None:
        """A finished or stopped study runs again (trials were added or asked for)."""
        if self.c.state.state in (StudyState.FINISHED, StudyState.STOPPED):
            self.c.set_study(StudyState.RUNNING, reason)

    def _add_trials(self, configs: list[dict[str, Any]]) -> None:
        seed = component_seed(self.c.spec.seed, "enqueued")
        for given in configs:
            trial_id = len(self.c.state.trials)
            params = complete_params(self.c.spec.space, given, index_rng(seed, trial_id))
            entry = rec.TrialCreatedEntry(
                params=params, seed=trial_seed(self.c.spec.seed, trial_id), info={"enqueued": True}
            )
            self.c.log(entry, trial=trial_id)
            logger.info("trial %d added by the user: %s", trial_id, params)
        self._reopen(f"{len(configs)} trial(s) added")

    def _ask(self, request: str) -> None:
        index = self.c.state.generated
        trial_id = len(self.c.state.trials)
        proposal = self.c.propose(index, self.c.view())
        info = {**proposal.info, "external": True, "request": request}
        entry = rec.TrialCreatedEntry(
            params=proposal.params,
            generator_index=index,
            seed=trial_seed(self.c.spec.seed, trial_id),
            info=info,
        )
        self.c.log(entry, trial=trial_id)
        self.c.set_trial(self.c.state.trials[trial_id], TrialStatus.RUNNING, "asked")
        self._reopen("a trial was asked for")
        answer = {"trial": trial_id, "params": proposal.params}
        self.c.after_commit(partial(self.c.wire.write_answer, request, answer))
        logger.info("trial %d asked for (%s): %s", trial_id, request, proposal.params)

    def _tell(self, command: dict[str, Any]) -> None:
        trial = self.c.state.trials[int(command["trial"])]
        step = int(command.get("step", self.c.spec.max_steps))
        metrics = {k: float(v) for k, v in command.get("values", {}).items()}
        now = self.c.clock.now()
        if metrics:
            self.c.writer.append_metrics(trial.trial_id, -1, step, now, metrics)
            value = metrics.get(self.c.spec.metric)
            ok = value is not None and not math.isnan(value)
            self.c.state.add_report(trial.trial_id, step, now, value if ok else None, metrics)
        else:
            trial.step = step
        self.c.dirty = True
        state = str(command.get("state", "completed"))
        if state in _TELL_STATUS:
            self.c.set_trial(trial, _TELL_STATUS[state], "told")


__all__ = ["TrialCommands"]
