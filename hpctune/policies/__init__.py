"""Pure policies (schedulers) and configuration generators.

Policies decide what runs; generators propose hyperparameter configurations. Both are pure: no
I/O, no Slurm, no clock. See :mod:`hpctune.policies._base` for the interface and
:mod:`hpctune.policies.registry` for how a policy is found by name (hpctune's own, another
package's, or ``MODULE:CLASS``).
"""

from __future__ import annotations

from hpctune.policies._base import (
    Action,
    ActionKind,
    Event,
    EventKind,
    Policy,
    PolicyDecision,
    PolicyTraits,
    StudyContext,
    StudyView,
    TrialView,
)
from hpctune.policies._options import OptionError, parse_options
from hpctune.policies.asha import AshaPolicy
from hpctune.policies.bandit import BanditPolicy
from hpctune.policies.default import DefaultPolicy
from hpctune.policies.earlyterm import EarlyTermPolicy
from hpctune.policies.freeze_thaw import FreezeThawPolicy
from hpctune.policies.hybrid import HybridPolicy
from hpctune.policies.hyperband import HyperbandPolicy
from hpctune.policies.median import MedianStoppingPolicy
from hpctune.policies.one_epoch import OneEpochPolicy
from hpctune.policies.pbt import PbtPolicy
from hpctune.policies.pbt_truncation import TruncationPbtPolicy
from hpctune.policies.pop import PopPolicy
from hpctune.policies.registry import POLICIES, make_policy, policy_class, policy_names
from hpctune.policies.replay import ReplayPolicy
from hpctune.policies.sha import ShaPolicy

__all__ = [
    "POLICIES",
    "Action",
    "ActionKind",
    "AshaPolicy",
    "BanditPolicy",
    "DefaultPolicy",
    "EarlyTermPolicy",
    "Event",
    "EventKind",
    "FreezeThawPolicy",
    "HybridPolicy",
    "HyperbandPolicy",
    "MedianStoppingPolicy",
    "OneEpochPolicy",
    "OptionError",
    "PbtPolicy",
    "Policy",
    "PolicyDecision",
    "PolicyTraits",
    "PopPolicy",
    "ReplayPolicy",
    "ShaPolicy",
    "StudyContext",
    "StudyView",
    "TrialView",
    "TruncationPbtPolicy",
    "make_policy",
    "parse_options",
    "policy_class",
    "policy_names",
]
