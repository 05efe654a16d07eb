"""The training API: the :class:`TrialContext` hpctune passes to the user's function.

A training function takes one argument and may use as little of it as it likes::

    def train(ctx):
        model = make_model(ctx.params["hidden"])
        state = ctx.load_checkpoint()                  # None on a fresh start
        if state is not None:
            model.load_state_dict(state["model"])
        for epoch in range(ctx.start_step, ctx.max_steps):
            lr = ctx.params["lr"]                      # a schedule is evaluated at ctx.step
            accuracy = train_one_epoch(model, lr)
            ctx.save_checkpoint({"model": model.state_dict()}, step=epoch + 1)
            if ctx.report(step=epoch + 1, accuracy=accuracy).should_stop:
                break

The controller's decision at a boundary comes back from :meth:`TrialContext.report`. A function
that ignores it is stopped at its next ``report`` by :class:`TrialStop` (the work of that step is
discarded), so a function that only reports still works under every policy.
"""

from __future__ import annotations

import hashlib
import math
import os
import pickle
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NoReturn

from hpctune.errors import CheckpointError, HpctuneError
from hpctune.files import sha256_file
from hpctune.study.boundaries import at_boundary, checkpoint_due
from hpctune.study.metric_names import MAX_METRIC_NAME, metric_name_problem
from hpctune.study.schedules import evaluate
from hpctune.study.seeding import step_seed
from hpctune.study.states import Decision
from hpctune.wire.clock import Clock, RealClock
from hpctune.wire.eventlog import EventWriter
from hpctune.wire.permissions import check_loadable
from hpctune.wire.protocol import EV_CHECKPOINT, EV_REPORT, Assignment, DecisionMessage
from hpctune.wire.storage import describe, storage_error

DEVICES_VARIABLE = "HPCTUNE_DEVICES"
"""The environment variable through which an executor tells its workers how many devices they
hold (:attr:`TrialContext.devices`)."""


def devices_from_environment(environ: Mapping[str, str] | None = None) -> int:
    """The worker's devices from ``HPCTUNE_DEVICES`` (set by the executor that started it):
    its GPUs when the study gives workers GPUs (``gpus_per_worker > 0``), else its CPUs
    (``cpus_per_worker``). 1 when unset or not a positive integer (a worker started by hand).
    """
    text = (os.environ if environ is None else environ).get(DEVICES_VARIABLE, "")
    try:
        value = int(text)
    except ValueError:
        return 1
    return value if value >= 1 else 1


class TrialStop(BaseException):
    """Raised in the user's function to end the segment (a stop, a suspend or a diverged metric).

    It derives from ``BaseException`` so that a broad ``except Exception`` in training code does
    not swallow it. Catch it only to clean up, then re-raise.
    """

    def __init__(self, decision: Decision, reason: str = "") -> None:
        self.decision = decision
        self.reason = reason
        super().__init__(f"{decision.value}: {reason}" if reason else decision.value)


@dataclass(frozen=True)
class ReportResult:
    """What :meth:`TrialContext.report` returns: the decision in force after this step."""

    decision: Decision
    reason: str = ""

    @property
    def should_stop(self) -> bool:
        """True when the function should return now (its checkpoint is saved already)."""
        return self.decision is not Decision.CONTINUE


class _HashingWriter:
    """A file wrapper that hashes and counts what is written through it."""

    def __init__(self, f: IO[bytes]) -> None:
        self._f = f
        self.sha256 = hashlib.sha256()
        self.nbytes = 0
        self.error: OSError | None = None  # a failed write (torch.save may wrap it)

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.nbytes += len(data)
        try:
            return self._f.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self._f.flush()


class TrialContext:
    """The user's handle on one segment of a trial.

    Attributes:
        trial_id: The trial's id.
        seed: A seed fixed per trial (same across segments), for ``torch.manual_seed`` etc.;
            in a stage-tree study the same for every trial (see :meth:`step_seed`).
        start_step: The step training resumes from (0 on a fresh start).
        until_step: The last step of this segment (the trial's last step unless the policy
            trains it in slices).
        max_steps: The trial's last step.
        step: The last step reported (``start_step`` before the first report).
        study_dir: The study directory.
        devices: The devices this trial may use: the worker's GPUs when the study gives
            workers GPUs (``[resources] gpus_per_worker > 0``), else its CPUs
            (``cpus_per_worker``; CPUs stand in for GPUs). A data-parallel training function
            spreads a fixed global batch over them (``torch.set_num_threads(ctx.devices)`` on
            CPUs, one process per GPU), so that its learning curve does not depend on them and
            only its time per step does (docs/elastic.md).
    """

    def __init__(
        self,
        assignment: Assignment,
        *,
        study_dir: Path,
        events: EventWriter,
        checkpoint_path: Callable[[int], Path],
        decision_file: Path,
        clock: Clock | None = None,
        interrupted: Callable[[], str] = lambda: "",
        highest_epoch: Callable[[], int] = lambda: 0,
        devices: int = 1,
    ) -> None:
        self._a = assignment
        self._events = events
        self._checkpoint_path = checkpoint_path
        self._decision_file = decision_file
        self._clock: Clock = clock or RealClock()
        self._interrupted = interrupted
        self._highest_epoch = highest_epoch
        self._epoch = assignment.epoch  # decisions of a lower controller epoch are stale
        self._decision = ReportResult(Decision.CONTINUE)
        self._last_poll = -math.inf
        self.trial_id = assignment.trial_id
        self.seed = assignment.seed
        self.start_step = assignment.start_step
        self.until_step = assignment.until_step
        self.max_steps = assignment.max_steps
        self.step = assignment.start_step
        self.study_dir = Path(study_dir)
        self.devices = int(devices)
        self.checkpoint_step: int | None = None  # the step of the last checkpoint saved here
        self.diverged: str = ""
        self.storage_error: str = ""  # a write failed for want of space or with an I/O error

    # -- hyperparameters --------------------------------------------------------------------

    @property
    def params(self) -> dict[str, Any]:
        """The hyperparameters in force at :attr:`step` (schedules evaluated)."""
        return self.params_at(self.step)

    @property
    def raw_params(self) -> Mapping[str, Any]:
        """The hyperparameters as stored (schedules as dicts)."""
        return self._a.params

    def params_at(self, step: float) -> dict[str, Any]:
        """The hyperparameters in force at ``step`` (fractional steps allowed)."""
        return {name: evaluate(value, step) for name, value in self._a.params.items()}

    def changed(self, step: int) -> dict[str, Any]:
        """The hyperparameters whose value at ``step`` differs from the step before (all of them
        at :attr:`start_step`): what a training loop must apply before training ``step``."""
        now = self.params_at(step)
        if step <= self.start_step:
            return now
        before = self.params_at(step - 1)
        return {name: v for name, v in now.items() if before[name] != v}

    def step_seed(self, step: int) -> int:
        """A seed for the randomness of training ``step`` (data order, dropout, augmentation):
        it depends on :attr:`seed` and ``step`` only, so a run resumed from a checkpoint, or a
        stage trained once for several trials, draws exactly what an uninterrupted run would."""
        return step_seed(self.seed, step)

    def checkpoint_due(self, step: int) -> bool:
        """True when a checkpoint must be saved after ``step``: at a boundary, at the end of
        this segment, and (stage trees) at the end of every stage, where other trials branch
        off. Saving at every step is always allowed."""
        return checkpoint_due(step, self._a.boundary, self.until_step, self._a.checkpoint_steps)

    def value(self, name: str, step: float | None = None) -> Any:
        """One hyperparameter at ``step`` (default :attr:`step`)."""
        if name not in self._a.params:
            raise KeyError(f"no hyperparameter {name!r}; the trial has {sorted(self._a.params)}")
        return self.params_at(self.step if step is None else step)[name]

    # -- reports and decisions ----------------------------------------------------------------

    @property
    def decision(self) -> Decision:
        """The decision in force (CONTINUE until the controller or the segment's end says so)."""
        return self._decision.decision

    @property
    def decision_reason(self) -> str:
        """Why the decision in force was taken (empty for CONTINUE)."""
        return self._decision.reason

    def report(self, step: int | None = None, **metrics: float) -> ReportResult:
        """Record metrics for ``step`` (default: the last step + 1) and return the decision.

        Steps must increase and stay within ``(start_step, max_steps]``. A non-finite value of the
        study metric ends the trial at once (it diverged). Metric names may be any text of 1 to
        200 characters (``**{"loss/val": v}`` works). If the
        previous report already asked the function to stop and it went on, :class:`TrialStop`
        is raised and this step is discarded.

        Raises:
            TrialStop: The trial must end now.
            HpctuneError: A bad step or metric value.
        """
        if self._decision.should_stop:
            raise TrialStop(self._decision.decision, self._decision.reason or "stop ignored")
        step = self.step + 1 if step is None else step
        if isinstance(step, bool) or not isinstance(step, int):
            raise HpctuneError(f"report(step=...) must be an int, but got {step!r}")
        if not self.step < step <= self.max_steps:
            raise HpctuneError(
                f"report(step={step}) must be after the last step {self.step} and at most "
                f"max_steps={self.max_steps}; resume from ctx.start_step={self.start_step}"
            )
        for name in metrics:
            problem = metric_name_problem(name)
            if problem:
                raise HpctuneError(
                    f"ctx.report(step={step}): {problem}; rename the metric (any name of 1 to "
                    f"{MAX_METRIC_NAME} characters works)"
                )
        values = {name: _to_float(name, value) for name, value in metrics.items()}
        boundary = at_boundary(step, self._a.boundary, self.until_step)
        try:
            self._events.write(
                {"kind": EV_REPORT, "t": self._clock.now(), "step": step, "metrics": values},
                fsync=boundary or bool(self._interrupted()),
            )
        except OSError as exc:
            self._storage_stop(exc, f"the report of step {step}")
        self.step = step
        metric = values.get(self._a.metric)
        if metric is not None and not math.isfinite(metric):
            self.diverged = f"{self._a.metric} is {metric} at step {step}"
            raise TrialStop(Decision.STOP, f"diverged: {self.diverged}")
        interruption = self._interrupted()
        if interruption and step < self.max_steps:
            self._decision = ReportResult(Decision.SUSPEND, interruption)
            return self._decision
        if step >= self.until_step:
            reason = "last step" if step >= self.max_steps else f"end of segment at {step}"
            self._decision = ReportResult(
                Decision.STOP if step >= self.max_steps else Decision.SUSPEND, reason
            )
            return self._decision
        self._poll_decision(step, wait=boundary)
        return self._decision

    def _poll_decision(self, step: int, *, wait: bool) -> None:
        """Read the controller's latest decision; at a boundary wait a little for this step's."""
        now = self._clock.now()
        if not wait and now - self._last_poll < 0.5:
            return
        deadline = now + (self._a.decision_wait if wait else 0.0)
        while True:
            self._last_poll = self._clock.now()
            message = DecisionMessage.read(self._decision_file)
            if (
                message is not None
                and message.segment_id == self._a.segment_id
                and message.decision is not Decision.CONTINUE
                and self._stale(message)
            ):
                message = None
            if message is not None and message.segment_id == self._a.segment_id:
                if message.decision is not Decision.CONTINUE:
                    self._decision = ReportResult(message.decision, message.reason)
                    return
                if message.step >= step:
                    return
            if self._clock.now() >= deadline:
                return  # go on; the decision applies at the next boundary
            self._clock.sleep(0.05)

    def _stale(self, message: DecisionMessage) -> bool:
        """True for a decision of a controller fenced by a higher epoch (to be ignored)."""
        self._epoch = max(self._epoch, self._highest_epoch())
        return message.epoch < self._epoch

    # -- checkpoints --------------------------------------------------------------------------

    def save_checkpoint(self, obj: Any, step: int | None = None) -> Path:
        """Save ``obj`` (with ``torch.save``) as the checkpoint of ``step`` (default :attr:`step`).

        The file is written under a temporary name, hashed while written, and renamed into place;
        only then is it announced to the controller (its event line holds the seconds the save
        took, which ``hpctune profile`` reads). Returns the file's path.
        """
        import torch

        step = self.step if step is None else step
        if step > self.step or step < self.start_step:
            raise HpctuneError(
                f"save_checkpoint(step={step}) must be between start_step={self.start_step} and "
                f"the last reported step {self.step}; report the step first or pass step="
            )
        path = self._checkpoint_path(step)
        tmp = path.with_name(f".{path.name}.tmp")
        writer: _HashingWriter | None = None
        began = time.perf_counter()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                writer = _HashingWriter(f)
                torch.save(obj, writer)  # type: ignore[arg-type]
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            seconds = time.perf_counter() - began
        except BaseException as exc:
            tmp.unlink(missing_ok=True)
            failed = storage_error(exc) or (writer.error if writer is not None else None)
            if failed is not None and storage_error(failed) is not None:
                self._storage_stop(failed, f"checkpoint {path.name}")
            raise
        try:
            self._events.write(
                {
                    "kind": EV_CHECKPOINT,
                    "t": self._clock.now(),
                    "step": step,
                    "path": str(path.relative_to(self.study_dir)),
                    "sha256": writer.sha256.hexdigest(),
                    "nbytes": writer.nbytes,
                    "seconds": round(seconds, 6),  # written, synced and renamed (profiles)
                },
                fsync=True,
            )
        except OSError as exc:
            path.unlink(missing_ok=True)  # never announced: nothing may use it
            self._storage_stop(exc, f"the event line of checkpoint {path.name}")
        self.checkpoint_step = step
        return path

    def _storage_stop(self, exc: OSError, what: str) -> NoReturn:
        """End the segment ``suspended``: a write failed for want of space or with an I/O
        error, which is not the trial's fault (its trial resumes from its last checkpoint).

        Raises:
            TrialStop: Always (``exc`` itself when it is another error).
        """
        if storage_error(exc) is None:
            raise exc
        self.storage_error = describe(exc, what)
        raise TrialStop(Decision.SUSPEND, self.storage_error) from exc

    def load_checkpoint(
        self, map_location: Any = "cpu", *, verify: bool = True, weights_only: bool = True
    ) -> Any:
        """Load the checkpoint this segment starts from, or return ``None`` on a fresh start.

        The file must match the SHA-256 the journal recorded when it was written, and is loaded
        with ``torch.load(weights_only=True)``: tensors, state dicts and plain containers and
        numbers, never arbitrary pickled objects. A checkpoint that holds other objects (a
        whole model, a custom class) needs ``weights_only=False``, which unpickles it: code in
        the file then runs, so use it only for checkpoints nobody else can write.

        Raises:
            CheckpointError: The file is missing, its checksum does not match the journal, or it
                holds objects ``weights_only=True`` refuses.
            AccessError: The file is writable by group or others or owned by another user.
        """
        if self._a.checkpoint is None:
            return None
        import torch

        path = self.study_dir / self._a.checkpoint
        if not path.exists():
            raise CheckpointError(f"checkpoint {path} of trial {self.trial_id} is missing")
        check_loadable(path, "the checkpoint")
        if verify and self._a.checkpoint_sha256:
            digest = sha256_file(path)
            if digest != self._a.checkpoint_sha256:
                raise CheckpointError(
                    f"checkpoint {path} has SHA-256 {digest}, but the journal recorded "
                    f"{self._a.checkpoint_sha256}; the file was changed or truncated"
                )
        try:
            return torch.load(path, map_location=map_location, weights_only=weights_only)
        except pickle.UnpicklingError as exc:
            if not weights_only:
                raise
            raise CheckpointError(
                f"checkpoint {path} holds objects that torch.load(weights_only=True) does not "
                f"load ({str(exc).splitlines()[0]}); save state dicts "
                "(`ctx.save_checkpoint({'model': model.state_dict()})`), or load it with "
                "`ctx.load_checkpoint(weights_only=False)` if only you can write the study "
                "directory (it runs code from the file)"
            ) from exc


def _to_float(name: str, value: Any) -> float:
    """Turn a metric value (number, numpy or torch scalar) into a float."""
    if isinstance(value, bool):
        raise HpctuneError(f"metric {name}={value!r} must be a number, not a bool")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise HpctuneError(
            f"metric {name}={value!r} must be a number (int, float, numpy or torch scalar)"
        ) from None
