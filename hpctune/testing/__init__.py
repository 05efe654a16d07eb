"""Tools to test code written for hpctune: the policy conformance kit.

Run ``check_policy(lambda context: MyPolicy(context, ...))`` (or ``hpctune check-policy
module:MyPolicy``) before a new policy is used: see :mod:`hpctune.testing.policy_conformance`
and docs/policies.md.
"""

from __future__ import annotations

from hpctune.testing._io_guard import ForbiddenIOError, Violation, forbid_io
from hpctune.testing._study_walk import StudyWalk, default_space
from hpctune.testing.policy_conformance import (
    CHECKS,
    ConformanceError,
    ConformanceReport,
    action_problem,
    check_policy,
    describe_action,
    describe_event,
    view_problems,
)

__all__ = [
    "CHECKS",
    "ConformanceError",
    "ConformanceReport",
    "ForbiddenIOError",
    "StudyWalk",
    "Violation",
    "action_problem",
    "check_policy",
    "default_space",
    "describe_action",
    "describe_event",
    "forbid_io",
    "view_problems",
]
