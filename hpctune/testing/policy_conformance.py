"""The policy conformance kit: run a policy through random, valid studies and check its contract.

:func:`check_policy` runs the policy on random studies (:mod:`._random_study`) with the real
scheduling core in memory, as the simulator runs it (a memory journal, simulated workers that
report made-up curves, crash, end early or are lost): most studies are taken over in mid-course
(trials in every status, curves, checkpoints, forks, predictions), and users stop and retry
trials. The policy gets the events the core gives it (SLOT_FREE, and BOUNDARY, REPORT and
PREDICTION as its traits ask) and the core carries out its actions. Every decision is checked
(:data:`CHECKS`, in this order):

* ``exception``: ``decide`` (and ``state_dict``, ``needed_checkpoints``, ...) does not raise;
* ``no-io``, ``no-clock``: no file, directory, socket, process or sleep; no clock of :mod:`time`;
* ``no-mutation``: the view is left as it was (trials' parameters, metrics, curves);
* ``state-json``: ``state_dict()`` is a mapping the journal can write (JSON);
* ``state-round-trip``: a new policy given that state (after JSON) gives the same state back;
* ``state-changes``: for a policy that tracks its state changes, each patch it gives the core
  turns the state as of its previous patch into its state now (:mod:`hpctune.journal.delta`);
* ``determinism``: two policies restored from the same state decide alike with the same seed;
* ``restart``: the policy restored from the journaled state before the decision decides as the
  policy that ran uninterrupted, and ends in the same state;
* ``slots``: no more START/RESUME/FORK actions than free slots on SLOT_FREE;
* ``legal``: a :class:`~hpctune.policies.PolicyDecision` of only actions the controller carries out
  (:func:`~hpctune.testing.action_problem`);

and, once every decision passed, on a small study of its own run from its start:

* ``liveness``: the policy starts trials and lets the study end.

A failure raises :class:`ConformanceError` naming the policy, the check, the event and the seed
that reproduces it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from hpctune.errors import UsageError
from hpctune.plugins import find
from hpctune.policies import POLICIES, make_policy
from hpctune.policies._base import OptionError, Policy, StudyContext
from hpctune.study.space import SearchSpace
from hpctune.testing._checks import PROBE_CONTEXT, Run
from hpctune.testing._contract import (
    action_problem,
    describe_action,
    describe_event,
    view_problems,
)
from hpctune.testing._io_guard import patched_clocks
from hpctune.testing._random_study import default_space
from hpctune.testing._results import CHECKS, ConformanceError, ConformanceReport


def check_policy(
    make: Callable[[StudyContext], Policy],
    *,
    seed: int = 0,
    n_views: int = 200,
    rounds: int = 12,
    space: SearchSpace | None = None,
) -> ConformanceReport:
    """Check the policies ``make()`` builds on ``n_views`` decisions of random studies, then
    that a policy lets a study run from its start end.

    Args:
        make: Builds a new policy with the options to check for a study's context (called
            for every random study, with its context, and for every restart).
        seed: The first study's seed (the next ones: ``seed + 1``, ...).
        n_views: Decisions to check (a view and an event each), over as many studies as needed.
        rounds: Rounds of each study (a round: the events of a stretch of the study, then
            free slots offered to the policy; a study may end sooner).
        space: The search space of the studies (default: floats, ints, categoricals, a fixed
            value and a schedule).

    Returns:
        What was checked (every check passed).

    Raises:
        ConformanceError: A check failed (the first failure).
        OptionError: The policy refuses the search space (``check_space``); pass ``space``.
        ValueError: ``n_views`` or ``rounds`` below 1.
    """
    if n_views < 1 or rounds < 1:
        raise ValueError(f"n_views and rounds must be >= 1, but got {n_views} and {rounds}")
    started = time.perf_counter()
    space = space if space is not None else default_space()
    first = make(PROBE_CONTEXT)
    first.check_space(space)
    run = Run(make, type(first).name or type(first).__name__, first.traits, n_views, rounds)
    studies = 0
    with _quiet_core(), patched_clocks():
        while run.decisions < n_views and studies < 10 * n_views:
            run.study(seed + studies, space)
            studies += 1
        run.liveness(seed, space)
    return ConformanceReport(
        policy=run.name,
        decisions=run.decisions,
        studies=studies,
        events=dict(run.events),
        actions=dict(run.actions),
        statuses=dict(run.statuses),
        seconds=time.perf_counter() - started,
    )


@contextlib.contextmanager
def _quiet_core() -> Iterator[None]:
    """Keep the core's and the simulator's warnings about the made-up studies (trials that
    end early, ...) off the user's screen while the kit runs; errors still show."""
    loggers = [logging.getLogger(name) for name in ("hpctune.core", "hpctune.simulator")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


# -- policies named on the command line -----------------------------------------------------------


def policy_factory(target: str, options: Mapping[str, Any]) -> Callable[[StudyContext], Policy]:
    """The factory ``hpctune check-policy TARGET --options JSON`` checks.

    ``TARGET`` is a policy of the registry (:func:`hpctune.policies.make_policy`: a registered
    name such as ``asha``, another package's, or ``MODULE:CLASS`` of a :class:`Policy`
    subclass, built from its ``Options`` dataclass as ``[policy]`` options are) or
    ``MODULE:FUNCTION``, a function returning a policy (called with the options and
    ``context``, the :class:`StudyContext`, as keyword arguments).
    Modules are imported with the current directory on ``sys.path``.

    Raises:
        UsageError: The target cannot be imported, is no policy, or refuses the options.
    """
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    found = find("policy", target, POLICIES)
    factory: Callable[[StudyContext], Policy]
    if isinstance(found, type) and issubclass(found, Policy):
        factory = lambda context: make_policy(target, options, context)  # noqa: E731
    elif isinstance(found, type) or not callable(found):
        raise UsageError(f"{target} is not a Policy subclass or a function returning one")
    else:
        factory = lambda context: found(context=context, **options)  # noqa: E731
    try:
        policy = factory(PROBE_CONTEXT)
    except (OptionError, TypeError, ValueError) as exc:
        raise UsageError(f"{target} with options {dict(options)}: {exc}") from exc
    if not isinstance(policy, Policy):
        raise UsageError(f"{target} returned a {type(policy).__name__}, not a Policy")
    return factory


__all__ = [
    "CHECKS",
    "PROBE_CONTEXT",
    "ConformanceError",
    "ConformanceReport",
    "action_problem",
    "check_policy",
    "describe_action",
    "describe_event",
    "policy_factory",
    "view_problems",
]
