"""Trials driven from outside the workers: ask/tell and hand-picked configurations.

Three inbox command kinds, each with its own validator (``(command, record) -> why not``, ""
when it can be carried out), in the style of the inbox's other commands:

- ``{"command": "add_trials", "params": [{...}, ...]}`` (``hpctune add-trials``): enqueue
  configurations (Optuna's ``enqueue_trial``) as new queued trials that the workers train like
  any other; parameters left out are drawn at random (seeded by the study seed and trial id). A
  finished or stopped study is running again once its controller reads the command.
- ``{"command": "ask", "request": "<id>"}``: the controller creates the generator's next trial
  as an *external* trial (running, never assigned to a worker) and answers in
  ``asked/<id>.json`` (written after the commit that records the trial).
- ``{"command": "tell", "trial": 3, "values": {"val_accuracy": 0.97}, "step": 20,
  "state": "completed"}``: the values of an external trial, journaled as its report at ``step``
  (default ``max_steps``); ``state`` ``completed`` (the default), ``terminated`` or ``failed``
  ends it; ``"running"`` records an intermediate report and leaves it running.

The journal keeps its one writer: :class:`AskTellClient` (``hpctune.read_study(dir,
write=True)``) only drops inbox files and reads the controller's answers.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpctune.files import read_json
from hpctune.journal.reader import read_study
from hpctune.journal.state import StudyRecord
from hpctune.study.space import (
    CategoricalParam,
    FixedParam,
    FloatParam,
    IntParam,
    Param,
    ScheduleParam,
    SearchSpace,
)
from hpctune.study.states import StudyState
from hpctune.wire.inbox import check_keys, send_command
from hpctune.wire.lease import Holder, holder, rival

ANSWERS_DIR = "asked"
TELL_STATES = ("completed", "terminated", "failed", "running")


def _param_problem(name: str, param: Param, value: Any) -> str:
    """Why ``value`` is not a value ``param`` can take ("" if it is)."""
    if isinstance(param, FloatParam | IntParam):
        integer = isinstance(param, IntParam)
        ok_type = isinstance(value, int) if integer else isinstance(value, int | float)
        if isinstance(value, bool) or not ok_type or not math.isfinite(value):
            kind = "an integer" if integer else "a number"
            return f"`{name}` must be {kind} in [{param.low}, {param.high}], but got {value!r}"
        if not param.low <= value <= param.high:
            return f"`{name}` must be in [{param.low}, {param.high}], but got {value!r}"
        return ""
    if isinstance(param, CategoricalParam):
        text = json.dumps(value, sort_keys=True)
        if all(json.dumps(c, sort_keys=True) != text for c in param.choices):
            return f"`{name}` must be one of {list(param.choices)}, but got {value!r}"
        return ""
    if isinstance(param, FixedParam):
        if json.dumps(value, sort_keys=True) != json.dumps(param.value, sort_keys=True):
            return f"`{name}` is fixed to {param.value!r}, but got {value!r}"
        return ""
    if isinstance(param, ScheduleParam):
        if not isinstance(value, Mapping):
            return f"`{name}` is a {param.shape} schedule: give its arguments as a table"
        for arg, sub in param.args.items():
            if arg in value:
                problem = _param_problem(f"{name}.{arg}", sub, value[arg])
                if problem:
                    return problem
        unknown = sorted(set(value) - set(param.args) - {"schedule"})
        if unknown:
            return f"`{name}` has no searched argument(s) {unknown}; arguments: {list(param.args)}"
    return ""


def params_problem(space: SearchSpace, params: Any) -> str:
    """Why ``params`` is not a (partial) configuration of ``space`` ("" if it is)."""
    if not isinstance(params, Mapping):
        return f"a configuration must be a JSON object, but got {params!r}"
    unknown = sorted(set(params) - set(space.params))
    if unknown:
        return (
            f"parameter(s) {unknown} are not in the search space; parameters: "
            f"{', '.join(space.params)}"
        )
    for name, value in params.items():
        problem = _param_problem(name, space.params[name], value)
        if problem:
            return problem
        if name in space.conditions and not _condition_may_hold(space, name, params):
            return f"`{name}` is given, but its condition {dict(space.conditions[name])} fails"
    return ""


def _condition_may_hold(space: SearchSpace, name: str, params: Mapping[str, Any]) -> bool:
    for other, allowed in space.conditions[name].items():
        if other in params and params[other] not in allowed:
            return False
    return True


def complete_params(space: SearchSpace, given: Mapping[str, Any], rng: Any) -> dict[str, Any]:
    """``given`` with every other active parameter drawn from ``rng`` (declaration order), a
    schedule's missing arguments too; inactive conditional parameters dropped."""
    config: dict[str, Any] = {}
    for name, param in space.params.items():
        if not space.is_active(name, config):
            continue
        if name not in given:
            config[name] = param.sample(rng)
        elif isinstance(param, ScheduleParam):
            drawn = param.sample(rng)
            args = {k: given[name].get(k, drawn[k]) for k in param.args}
            config[name] = param._build(args)
        else:
            config[name] = given[name]
    return config


def check_add_trials(command: Mapping[str, Any], record: StudyRecord) -> str:
    """``{"command": "add_trials", "params": [{...}, ...]}``: enqueue configurations."""
    problem = check_keys(command, ("params",))
    if problem:
        return problem
    if int(record.spec.get("resources", {}).get("slots", 1)) == 0:
        return "the study has no workers (`resources.slots = 0`); ask for trials instead"
    params = command.get("params")
    if not isinstance(params, list) or not params:
        return f"'params' must be a non-empty list of configurations, but got {params!r}"
    space = SearchSpace.from_dict(record.spec["space"])
    for i, config in enumerate(params):
        problem = params_problem(space, config)
        if problem:
            return f"configuration {i}: {problem}"
    return ""


def check_ask(command: Mapping[str, Any], record: StudyRecord) -> str:
    """``{"command": "ask", "request": "<id>"}``: a new external trial from the generator."""
    problem = check_keys(command, ("request",))
    if problem:
        return problem
    request = command.get("request")
    if not isinstance(request, str) or not request.isidentifier():
        return f"'request' must be an identifier (letters, digits, _), but got {request!r}"
    if record.generated >= int(record.spec["num_trials"]):
        return (
            f"the generator has created all {record.spec['num_trials']} trials of the study "
            "(`study.num_trials`); add configurations with add_trials instead"
        )
    return ""


def check_tell(command: Mapping[str, Any], record: StudyRecord) -> str:
    """``{"command": "tell", "trial": 3, "values": {...}, "step": 20, "state": "completed"}``."""
    problem = check_keys(command, ("trial", "values", "step", "state"))
    if problem:
        return problem
    tid = command.get("trial")
    if isinstance(tid, bool) or not isinstance(tid, int) or tid not in record.trials:
        return f"'trial' must name a trial of the study, but got {tid!r}"
    trial = record.trials[tid]
    if not trial.info.get("external"):
        return f"trial {tid} is trained by the workers; only asked trials are told"
    if trial.status.is_final:
        return f"trial {tid} has ended already ({trial.status.value})"
    state = command.get("state", "completed")
    if state not in TELL_STATES:
        return f"'state' must be one of {', '.join(TELL_STATES)}, but got {state!r}"
    values = command.get("values", {})
    if not isinstance(values, Mapping) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in values.values()
    ):
        return f"'values' must map metric names to numbers, but got {values!r}"
    max_steps = int(record.spec["max_steps"])
    step = command.get("step", max_steps)
    if isinstance(step, bool) or not isinstance(step, int) or not trial.step < step <= max_steps:
        return f"'step' must be an integer in ({trial.step}, {max_steps}], but got {step!r}"
    if state == "completed":
        needed = [m for m, _ in record.spec.get("objectives") or []] or [record.metric]
        missing = [m for m in needed if m not in values]
        if missing:
            return f"a completed trial needs a value of {', '.join(missing)}"
    return ""


VALIDATORS = {"add_trials": check_add_trials, "ask": check_ask, "tell": check_tell}


# --------------------------------------------------------------------------------------------
# The client side


@dataclass(frozen=True)
class AskedTrial:
    """A trial the controller created for ``ask()``.

    Attributes:
        trial_id: Its id in the study.
        params: Its hyperparameters.
    """

    trial_id: int
    params: dict[str, Any]


class AskTellClient:
    """Ask a running controller for trials and tell it their values, through its inbox.

    Args:
        directory: The study directory (its controller must be running to answer).
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory).resolve()
        self.inbox = self.directory / "inbox"

    def ask(self, timeout: float = 120.0, poll: float = 0.05) -> AskedTrial:
        """Ask for a new trial; wait (up to ``timeout`` s) for the controller's answer.

        The request is withdrawn from the inbox when no answer comes, so a later ``resume``
        does not create a trial nobody asked for.

        Raises:
            TimeoutError: No answer in time (is the controller running? `hpctune status`).
            RuntimeError: The controller refused the request, or it ended the study without
                answering (the reason is in the message).
        """
        request = f"r{uuid.uuid4().hex}"
        sent = send_command(self.inbox, {"command": "ask", "request": request})
        answer = self.directory / ANSWERS_DIR / f"{request}.json"
        rejected = self.inbox / "rejected" / f"{sent.name}.reason.txt"
        deadline = time.monotonic() + timeout
        next_check = time.monotonic() + 1.0
        looked_at: Holder | None = None  # the gone controller whose study was last read
        while time.monotonic() < deadline:
            data = read_json(answer)
            if isinstance(data, dict):
                answer.unlink(missing_ok=True)
                return AskedTrial(int(data["trial"]), dict(data["params"]))
            if rejected.exists():
                raise RuntimeError(f"ask refused: {rejected.read_text().strip()}")
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + 1.0
                gone = self._gone_controller()
                if gone is not None and gone != looked_at:  # the journal, once per controller
                    looked_at = gone
                    ended = self._ended_without_answer(sent)
                    if ended:
                        raise RuntimeError(f"ask not answered: {ended}")
            time.sleep(poll)
        sent.unlink(missing_ok=True)
        raise TimeoutError(
            f"no answer to ask() within {timeout:g} s from the controller of {self.directory} "
            f"(request withdrawn); is it running? (`hpctune status {self.directory}`)"
        )

    def _gone_controller(self) -> Holder | None:
        """The study's last controller once it no longer runs (ended or died), else ``None``
        (none started yet, or one is running)."""
        found = holder(self.directory)
        return found if found is not None and rival(self.directory) is None else None

    def _ended_without_answer(self, sent: Path) -> str:
        """Why an ask can no longer be answered now that the study's controller is gone (""
        while it may be): the study is in a final state. Withdraws the request then."""
        record = read_study(self.directory).record
        if record.state not in (StudyState.FINISHED, StudyState.FAILED, StudyState.STOPPED):
            return ""  # its controller may be requeued or resumed
        try:
            sent.unlink()
        except FileNotFoundError:
            return ""  # a controller took the request after all: its answer is coming
        why = check_ask({"request": "r"}, record)
        return (
            f"the study in {self.directory} is {record.state.value} and no controller is running"
            + (f"; {why}" if why else f" (`hpctune resume {self.directory}`, then ask again)")
        )

    def tell(
        self,
        trial: AskedTrial | int,
        values: float | Mapping[str, float],
        *,
        step: int | None = None,
        state: str = "completed",
    ) -> Path:
        """Report ``values`` of an asked trial (a number: the study metric's value).

        ``state`` ``"completed"`` ends the trial (also ``"terminated"``, ``"failed"``);
        ``"running"`` records an intermediate report at ``step``. Returns the inbox file; the
        controller journals it at its next iteration.
        """
        trial_id = trial.trial_id if isinstance(trial, AskedTrial) else int(trial)
        if not isinstance(values, Mapping):
            values = {read_study(self.directory).metric: float(values)}
        command: dict[str, Any] = {
            "command": "tell",
            "trial": trial_id,
            "values": {k: float(v) for k, v in values.items()},
            "state": state,
        }
        if step is not None:
            command["step"] = int(step)
        return send_command(self.inbox, command)

    def add_trials(self, params: list[dict[str, Any]]) -> Path:
        """Enqueue configurations (see ``hpctune add-trials``); return the inbox file."""
        return send_command(self.inbox, {"command": "add_trials", "params": params})


__all__ = [
    "TELL_STATES",
    "VALIDATORS",
    "AskTellClient",
    "AskedTrial",
    "check_add_trials",
    "check_ask",
    "check_tell",
    "complete_params",
    "params_problem",
]
