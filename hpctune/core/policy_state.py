"""The policy's state in the journal: a patch of the state journaled before at each commit
where it changed, the whole state now and then."""

from __future__ import annotations

import json
import marshal
import pickle
from typing import TYPE_CHECKING, Any

from hpctune.files import dumps
from hpctune.journal import records as rec
from hpctune.journal.delta import state_delta

if TYPE_CHECKING:
    from hpctune.core.hosts import PolicyStateHost

POLICY_SNAPSHOT_EVERY = 200  # policy_delta records between two whole policy states


class PolicyStateJournal:
    """Journals the policy's state when it changed (at the core's commits).

    Args:
        controller: The core whose policy's state is journaled.
    """

    def __init__(self, controller: PolicyStateHost) -> None:
        self.c = controller
        self._raw: dict[str, Any] | None = None  # a copy of the state last journaled
        self._baseline = False  # a policy that tracks its changes had a whole state
        self._patches = 0  # policy_delta records since the last whole state

    def journal(self) -> None:
        """Journal the policy's state when it changed: a patch of the one journaled before
        (``policy_delta``), the whole state once per controller and every
        ``POLICY_SNAPSHOT_EVERY`` patches (a reader's replay stays short).

        The state is compared and patched as the policy gives it, against a copy of the last
        one journaled (pickled: the policy may change its own objects later); only the patch is
        serialised, so a state that grows with the study costs a commit what changed. A policy
        that tracks its changes (``tracks_state_changes``: ASHA) gives the patch itself, and a
        commit costs the change alone, neither the state's building nor its comparison.
        """
        policy = self.c.policy
        if policy.traits.tracks_state_changes:
            self._journal_tracked()
            return
        raw = policy.state_dict()
        previous = self._raw
        if previous is not None and raw == previous:
            return
        if previous is None:
            text = dumps(raw)
            if json.loads(text) == self.c.state.policy_state:
                self._raw = _copy_state(raw)
                return
        self._raw = _copy_state(raw)
        if previous is None or self._patches >= POLICY_SNAPSHOT_EVERY:
            self._patches = 0
            self.c.log(rec.PolicyStateEntry(state=raw))
        else:
            self._patches += 1
            self.c.log(rec.PolicyDeltaEntry(delta=state_delta(previous, raw)))

    def _journal_tracked(self) -> None:
        """The policy's own patch since the last commit (``policy_delta``); the whole state
        (``policy_state``) once per controller, unless the journal holds it already, and every
        ``POLICY_SNAPSHOT_EVERY`` patches."""
        policy = self.c.policy
        changes = policy.state_changes()
        if self._baseline and self._patches < POLICY_SNAPSHOT_EVERY:
            if changes:
                self._patches += 1
                self.c.log(rec.PolicyDeltaEntry(delta=changes))
            return
        self._baseline = True
        raw = policy.state_dict()
        if json.loads(dumps(raw)) != self.c.state.policy_state:
            self._patches = 0
            self.c.log(rec.PolicyStateEntry(state=raw))


def _copy_state(state: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of a policy's state (marshal: the fastest for plain data; pickle when the
    state holds other types, e.g. numpy scalars)."""
    try:
        copied = marshal.loads(marshal.dumps(state))
    except ValueError:
        copied = pickle.loads(pickle.dumps(state))
    return dict(copied)


__all__ = ["POLICY_SNAPSHOT_EVERY", "PolicyStateJournal"]
