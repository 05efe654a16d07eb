"""What the conformance kit reports: its checks, the error a failure raises (with the call that
reproduces it) and the report of a run that passed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hpctune.policies import Event, StudyView
from hpctune.testing._contract import describe_event

#: The checks, in the order they are made (``liveness`` once every decision passed).
CHECKS: tuple[str, ...] = (
    "exception",
    "no-io",
    "no-clock",
    "no-mutation",
    "state-json",
    "state-round-trip",
    "state-changes",
    "determinism",
    "restart",
    "slots",
    "legal",
    "liveness",
)


class ConformanceError(AssertionError):
    """A policy broke its contract.

    Attributes:
        policy: The policy's name.
        check: Which check failed (one of :data:`CHECKS`).
        detail: What was wrong.
        event: The event decided on (``None`` outside ``decide``: a hook such as
            ``needed_checkpoints``, or the liveness study).
        seed: The seed of the study it happened in.
        decision: How many decisions of that study were checked, this one included (0: the
            failure came before the first).
        views: ``check_policy(make, seed=seed, n_views=views)`` reproduces the failure.
        headline: The message without the reproducer.
        view: The view the policy was given, or ``None``.
        actions: The actions it returned, or ``None``.
    """

    def __init__(
        self,
        policy: str,
        check: str,
        detail: str,
        *,
        event: Event | None,
        seed: int,
        decision: int,
        view: StudyView | None = None,
        actions: Sequence[Any] | None = None,
        views: int | None = None,
    ) -> None:
        self.policy = policy
        self.check = check
        self.detail = detail
        self.event = event
        self.seed = seed
        self.decision = decision
        self.view = view
        self.actions = actions
        if check == "liveness":
            where = f"on the study with seed {seed}, run from its start"
        else:
            what = describe_event(event) if event is not None else "a call outside decide"
            where = f"at decision {decision} ({what}) of the study with seed {seed}"
        self.headline = f"policy {policy!r} failed the check {check!r} {where}: {detail}"
        self.views = views if views is not None else max(decision, 1)
        super().__init__(
            f"{self.headline}\nreproduce: check_policy(make, seed={seed}, n_views={self.views})"
        )


@dataclass(frozen=True)
class ConformanceReport:
    """What :func:`check_policy` ran (it raises on the first failure, so all checks passed).

    Attributes:
        policy: The policy's name.
        decisions: Decisions checked.
        studies: Random studies the decisions were checked in (the liveness study apart).
        events: Decisions per event kind (``slot_free``, ``boundary``, ...).
        actions: Actions returned per kind (``start``, ``terminate``, ...).
        statuses: Trials seen per status, summed over the decisions' views.
        seconds: Wall time of the run.
    """

    policy: str
    decisions: int
    studies: int
    events: Mapping[str, int]
    actions: Mapping[str, int]
    statuses: Mapping[str, int]
    seconds: float
    checks: tuple[str, ...] = CHECKS

    def summary(self) -> str:
        """One paragraph for people."""
        events = ", ".join(f"{k} {v}" for k, v in sorted(self.events.items()))
        actions = ", ".join(f"{k} {v}" for k, v in sorted(self.actions.items())) or "none"
        return (
            f"policy {self.policy!r} passed {len(self.checks)} checks ({', '.join(self.checks)}) "
            f"on {self.decisions} decisions in {self.studies} random studies "
            f"({self.seconds:.1f} s)\n  events: {events}\n  actions: {actions}"
        )


__all__ = ["CHECKS", "ConformanceError", "ConformanceReport"]
