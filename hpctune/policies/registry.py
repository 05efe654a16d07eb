"""The policy registry: a policy found by its name, hpctune's own or another package's.

``[policy] name`` (and ``hpctune simulate --policy``, ``hpctune check-policy``) is one of
:data:`POLICIES`, a name another package registers in the entry-point group
``hpctune.policies``, or an importable ``MODULE:CLASS`` (a :class:`Policy` subclass); see
:mod:`hpctune.plugins` and docs/policies.md "Bring your own policy".
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from hpctune.plugins import PluginError, find_class, registered
from hpctune.policies._base import Policy, StudyContext
from hpctune.policies._options import OptionError
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
from hpctune.policies.replay import ReplayPolicy
from hpctune.policies.sha import ShaPolicy

logger = logging.getLogger(__name__)

#: hpctune's own policies, by name.
POLICIES: Mapping[str, type[Policy]] = {
    DefaultPolicy.name: DefaultPolicy,
    BanditPolicy.name: BanditPolicy,
    ShaPolicy.name: ShaPolicy,
    AshaPolicy.name: AshaPolicy,
    HyperbandPolicy.name: HyperbandPolicy,
    MedianStoppingPolicy.name: MedianStoppingPolicy,
    PopPolicy.name: PopPolicy,
    EarlyTermPolicy.name: EarlyTermPolicy,
    HybridPolicy.name: HybridPolicy,
    FreezeThawPolicy.name: FreezeThawPolicy,
    OneEpochPolicy.name: OneEpochPolicy,
    PbtPolicy.name: PbtPolicy,
    TruncationPbtPolicy.name: TruncationPbtPolicy,
    ReplayPolicy.name: ReplayPolicy,
}


def policy_class(name: str) -> type[Policy]:
    """The policy class ``name``: one of :data:`POLICIES`, another package's (entry point
    ``hpctune.policies``) or an importable ``MODULE:CLASS``.

    Raises:
        PluginError: Unknown (with a close match and the known names), it fails to load, or it
            is not a :class:`Policy` subclass.
    """
    found: type[Policy] = find_class("policy", name, POLICIES, Policy)
    return found


def policy_names(**traits: bool) -> list[str]:
    """The registered policies (hpctune's own, then other packages') whose
    :class:`PolicyTraits` have the given values, e.g. ``policy_names(rungs_known=True)``.

    Another package's policy that fails to load is left out, with a warning.
    """
    names = []
    for name in registered("policy", POLICIES):
        try:
            cls = policy_class(name)
        except PluginError as exc:
            logger.warning("%s", exc)
            continue
        if all(getattr(cls.traits, key) == value for key, value in traits.items()):
            names.append(name)
    return names


def make_policy(name: str, options: Mapping[str, Any], context: StudyContext) -> Policy:
    """Build the policy ``name`` (see :func:`policy_class`) with ``options`` (the ``[policy]``
    table without ``name``) for the study ``context`` (:func:`hpctune.spec.study_context`).

    Raises:
        OptionError: The name is unknown or not a policy (``key`` is ``"name"``), or an option
            is invalid (``key`` names which).
    """
    try:
        cls = policy_class(name)
    except PluginError as exc:
        raise OptionError("name", str(exc)) from exc
    return cls.from_options(context, options)


__all__ = ["POLICIES", "make_policy", "policy_class", "policy_names"]
