"""Tools to test code written for hpctune: the policy conformance kit.

Run ``check_policy(lambda context: MyPolicy(context, ...))`` (or ``hpctune check-policy
module:MyPolicy``) before a new policy is used: see :mod:`hpctune.testing.policy_conformance`
and docs/policies.md. :class:`RandomStudy` draws the kit's random studies, run by the real
scheduling core in memory.
"""

from __future__ import annotations

from hpctune.testing._contract import (
    action_problem,
    describe_action,
    describe_event,
    view_problems,
)
from hpctune.testing._io_guard import ForbiddenIOError, Violation, forbid_io
from hpctune.testing._random_study import RandomStudy, default_space
from hpctune.testing._results import CHECKS, ConformanceError, ConformanceReport
from hpctune.testing.policy_conformance import check_policy

__all__ = [
    "CHECKS",
    "ConformanceError",
    "ConformanceReport",
    "ForbiddenIOError",
    "RandomStudy",
    "Violation",
    "action_problem",
    "check_policy",
    "default_space",
    "describe_action",
    "describe_event",
    "forbid_io",
    "view_problems",
]
