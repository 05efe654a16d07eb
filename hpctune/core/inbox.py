"""The users' commands: the inbox read into the journal, each command carried out."""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, Any

from hpctune.journal import records as rec
from hpctune.study.states import StudyState, TrialStatus
from hpctune.wire.asktell import VALIDATORS as TRIAL_COMMANDS
from hpctune.wire.inbox import RETRYABLE, VALIDATORS, check_command

if TYPE_CHECKING:
    from hpctune.core.hosts import InboxHost

logger = logging.getLogger(__name__)

COMMANDS = {**VALIDATORS, **TRIAL_COMMANDS}  # every inbox command kind and its validator


class Inbox:
    """Reads the users' command files (``hpctune stop``, ``retry``, ``resume --set``, ask and
    tell, ...), journals each, and carries it out.

    Args:
        controller: The core the commands are for.
    """

    def __init__(self, controller: InboxHost) -> None:
        self.c = controller

    def read(self) -> None:
        """Carry out new inbox files; journal and set aside (``inbox/rejected/``) bad ones."""
        c = self.c
        for name in c.wire.inbox():
            if name in c.state.commands_done:
                continue
            read = c.wire.read_command(name)
            if read is None:
                continue  # unparsable but young: it may still be being written
            command, problem = read
            problem = problem or check_command(command, c.state, COMMANDS)
            if problem:
                logger.warning("inbox file %s rejected: %s", name, problem)
                shown = command if isinstance(command, dict | list | str | int | float) else None
                c.log(rec.CommandEntry(file=name, command=shown, rejected=problem))
                c.after_commit(partial(c.wire.reject_command, name, problem))
                continue
            c.log(rec.CommandEntry(file=name, command=command))
            c.after_commit(partial(c.wire.remove_command, name))
            self._carry_out(command)

    def _carry_out(self, command: dict[str, Any]) -> None:
        """Carry out a command its validator accepted (:mod:`hpctune.wire.inbox`)."""
        c = self.c
        kind = command["command"]
        if kind in TRIAL_COMMANDS:
            c.commands.carry_out(command)
        elif kind == "stop":
            c.request_stop(str(command.get("reason") or "stopped by the user"))
        elif kind == "stop_trial":
            c.actions.terminate(c.state.trials[command["trial"]], "stopped by the user")
        elif kind == "retry":
            ids = list(command.get("trials", []))
            if command.get("failed"):
                trials = c.state.trials.values()
                ids += [t.trial_id for t in trials if t.status is TrialStatus.FAILED]
            self._retry(sorted(set(ids)))
        elif kind == "settings":  # `hpctune resume --set`: settings for the next jobs
            c.pool.change_settings(command)
        elif kind == "deadline":  # `hpctune resume --deadline`: re-plan to the new one
            c.elastic.change_deadline(command)

    def _retry(self, trial_ids: list[int]) -> None:
        """Queue failed (or ended early) trials again from their last good checkpoint.

        A checkpoint whose file is missing or whose SHA-256 differs from the journal's is
        deleted (journaled) and the trial falls back to its previous one, or to its start.
        """
        c = self.c
        for trial_id in trial_ids:
            trial = c.state.trials[trial_id]
            if trial.status not in RETRYABLE:
                continue
            while trial.checkpoint_row is not None:
                ref = c.state.checkpoints[trial.checkpoint_row]
                problem = c.wire.checkpoint_problem(ref.path, ref.sha256)
                if not problem:
                    break
                logger.warning("trial %d: checkpoint %s %s; skipped", trial_id, ref.path, problem)
                c.ingest.delete_checkpoints([ref.row])
            c.set_trial(trial, TrialStatus.QUEUED, "retried by the user", retries=0, error="")
        if trial_ids and c.state.state in (StudyState.FINISHED, StudyState.FAILED):
            c.set_study(StudyState.RUNNING, f"trials {trial_ids} retried")


__all__ = ["COMMANDS", "Inbox"]
