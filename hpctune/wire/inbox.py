"""User commands through the study's inbox: writing them, reading them, checking them.

A command is one JSON object in ``inbox/<time>-<id>.json``, written atomically by whoever sends
it (`hpctune stop`, `hpctune retry`). The controller reads each file once, checks it with the
validator of its kind and either journals and carries it out or journals why not and moves the
file to ``inbox/rejected/`` (with ``<file>.reason.txt``): a bad file never stops the controller.
Every kind has one validator in :data:`VALIDATORS`; a new kind adds its own in the same style.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hpctune.files import write_bytes_atomic, write_json_atomic
from hpctune.journal.state import StudyRecord
from hpctune.study.states import TrialStatus

INBOX_GRACE = 2.0  # seconds: an unparsable file younger than this may still be being written
MAX_COMMAND_BYTES = 1 << 20
RETRYABLE = (TrialStatus.FAILED, TrialStatus.ENDED_EARLY)
_COMMON = ("command", "reason", "time", "user", "host")

Validator = Callable[[Mapping[str, Any], StudyRecord], str]


def check_keys(command: Mapping[str, Any], allowed: tuple[str, ...]) -> str:
    """Why ``command`` has keys other than the common ones and ``allowed`` ("" if none)."""
    unknown = sorted(set(command) - set(_COMMON) - set(allowed))
    if unknown:
        valid = ", ".join((*_COMMON, *allowed))
        return f"unknown key(s) {', '.join(map(repr, unknown))}; valid keys: {valid}"
    if not isinstance(command.get("reason", ""), str):
        return f"'reason' must be a string, but got {command['reason']!r}"
    return ""


def _trial_id(value: Any, record: StudyRecord, what: str) -> str:
    """Why ``value`` is not the id of a trial of the study ("" if it is)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{what} must be a trial id (an integer), but got {value!r}"
    if value not in record.trials:
        known = f"0..{len(record.trials) - 1}" if record.trials else "none yet"
        return f"{what} {value} names no trial of the study (trials: {known})"
    return ""


def check_stop(command: Mapping[str, Any], record: StudyRecord) -> str:
    """``{"command": "stop", "reason": "..."}``: stop the study cooperatively."""
    return check_keys(command, ())


def check_stop_trial(command: Mapping[str, Any], record: StudyRecord) -> str:
    """``{"command": "stop_trial", "trial": 3}``: terminate one trial that has not ended."""
    problem = check_keys(command, ("trial",)) or _trial_id(command.get("trial"), record, "'trial'")
    if problem:
        return problem
    trial = record.trials[command["trial"]]
    if trial.status.is_final:
        return f"trial {trial.trial_id} has ended already ({trial.status.value})"
    return ""


def check_retry(command: Mapping[str, Any], record: StudyRecord) -> str:
    """``{"command": "retry", "trials": [1, 4], "failed": true}``: queue failed (or ended
    early) trials again from their last good checkpoint; ``failed``: every failed trial."""
    problem = check_keys(command, ("trials", "failed"))
    if problem:
        return problem
    trials, failed = command.get("trials", []), command.get("failed", False)
    if not isinstance(failed, bool):
        return f"'failed' must be true or false, but got {failed!r}"
    if not isinstance(trials, list):
        return f"'trials' must be a list of trial ids, but got {trials!r}"
    if not trials and not failed:
        return "name trials ('trials': [ids]) or set 'failed': true"
    for value in trials:
        problem = _trial_id(value, record, "'trials' entry")
        if problem:
            return problem
        status = record.trials[value].status
        if status not in RETRYABLE:
            return f"trial {value} is {status.value}; only failed or ended_early trials retry"
    return ""


def check_settings(command: Mapping[str, Any], record: StudyRecord) -> str:
    """``{"command": "settings", "section": "slurm", "settings": {...}, "changes": {...},
    "source": "..."}`` (`hpctune resume --set/--spec`): the settings of the backend's section
    for the jobs it starts from now on (the executor checks them when it takes them)."""
    problem = check_keys(command, ("section", "settings", "changes", "source"))
    if problem:
        return problem
    if not isinstance(command.get("section"), str) or not command["section"]:
        return f"'section' must name the backend's section, but got {command.get('section')!r}"
    for key in ("settings", "changes"):
        if not isinstance(command.get(key, {}), dict):
            return f"{key!r} must be a table, but got {command[key]!r}"
    if "settings" not in command:
        return "'settings' (the section's new settings) is missing"
    return ""


def check_deadline(command: Mapping[str, Any], record: StudyRecord) -> str:
    """``{"command": "deadline", "deadline": 10800, "source": "--deadline 3h"}`` (`hpctune
    resume --deadline`): the study's new deadline, seconds from its start; the controller
    re-plans the stages not yet finished."""
    problem = check_keys(command, ("deadline", "source"))
    if problem:
        return problem
    value = command.get("deadline")
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        return f"'deadline' must be a number of seconds > 0, but got {value!r}"
    return ""


VALIDATORS: dict[str, Validator] = {
    "stop": check_stop,
    "stop_trial": check_stop_trial,
    "retry": check_retry,
    "settings": check_settings,
    "deadline": check_deadline,
}


def check_command(
    command: Any, record: StudyRecord, validators: Mapping[str, Validator] = VALIDATORS
) -> str:
    """Why ``command`` cannot be carried out ("" when it can): its kind's validator in
    ``validators`` decides (the controller adds :data:`hpctune.wire.asktell.VALIDATORS`)."""
    if not isinstance(command, dict):
        return f"a command must be a JSON object, but the file holds {type(command).__name__}"
    kind = command.get("command")
    validator = validators.get(kind) if isinstance(kind, str) else None
    if validator is None:
        return f"unknown command {kind!r}; known commands: {', '.join(validators)}"
    return validator(command, record)


def read_command(path: Path, now: float | None = None) -> tuple[Any, str] | None:
    """Read an inbox file: ``(command, "")``, ``(None, why it is unreadable)``, or ``None``
    while an unparsable file is younger than ``INBOX_GRACE`` (a hand-written file may still be
    being written)."""
    try:
        size = path.stat().st_size
        if size > MAX_COMMAND_BYTES:
            return None, f"the file has {size} bytes; a command has at most {MAX_COMMAND_BYTES}"
        data = path.read_bytes()
        mtime = path.stat().st_mtime
    except FileNotFoundError:
        return None
    except OSError as exc:
        return None, f"the file cannot be read: {exc}"
    try:
        return json.loads(data), ""
    except (ValueError, UnicodeDecodeError) as exc:
        if (time.time() if now is None else now) - mtime < INBOX_GRACE:
            return None
        return None, f"not JSON: {exc}"


def reject_file(inbox: Path, name: str, reason: str) -> None:
    """Move ``inbox/<name>`` to ``inbox/rejected/<name>`` next to ``<name>.reason.txt``."""
    folder = inbox / "rejected"
    folder.mkdir(exist_ok=True)
    write_bytes_atomic(folder / f"{name}.reason.txt", (reason + "\n").encode())
    source = inbox / name
    if source.exists():
        source.replace(folder / name)


def send_command(inbox: Path, command: dict[str, Any]) -> Path:
    """Drop ``command`` in the inbox (atomically); return the file's path."""
    inbox.mkdir(parents=True, exist_ok=True)
    path = inbox / f"{time.time():.6f}-{uuid.uuid4().hex[:8]}.json"
    write_json_atomic(path, {**command, "time": time.time()}, fsync=True)
    return path
