"""Writes that fail (a full disk, a quota, I/O errors): new assignments pause until a check
finds room again; no trial is failed for it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hpctune.errors import StorageError
from hpctune.wire.storage import format_bytes

if TYPE_CHECKING:
    from hpctune.core.hosts import StorageHost

logger = logging.getLogger(__name__)

STORAGE_RETRY = 2.0  # seconds between checks while writes fail (full disk, I/O errors)
STORAGE_MARGIN = 1 << 20  # bytes the journal and event files need besides checkpoints


@dataclass
class StorageFault:
    """Writes failing since ``since`` (controller time); new assignments wait."""

    since: float
    detail: str
    checked: float = 0.0


class StorageWatch:
    """Pauses new assignments while writes fail, and tells when they work again.

    Args:
        controller: The core whose writes are watched.

    Attributes:
        fault: Writes failing (``None``: they work).
    """

    def __init__(self, controller: StorageHost) -> None:
        self.c = controller
        self.fault: StorageFault | None = None

    def failed(self, what: str, where: str) -> None:
        """Writes fail: pause new assignments until :meth:`writable` finds room again."""
        if self.fault is None:
            logger.error("%s (%s): new assignments wait until writes succeed", what, where)
            now = self.c.clock.now()
            self.fault = StorageFault(now, what, now)

    def _space_needed(self) -> int:
        """Bytes the study needs free to go on: a checkpoint per running segment and one more
        (the largest so far), and a margin for the journal and event files."""
        state = self.c.state
        largest = state.checkpoints.max_nbytes()
        return largest * (len(state.active_segments()) + 1) + STORAGE_MARGIN

    def writable(self) -> bool:
        """While writes fail, retry every ``STORAGE_RETRY`` s; return True once they work.

        Raises:
            StorageError: They kept failing for ``storage_patience`` seconds.
        """
        fault = self.fault
        if fault is None:
            return True
        now = self.c.clock.now()
        if now - fault.checked < STORAGE_RETRY:
            return False
        fault.checked = now
        needed = self._space_needed()
        ok, free = self.c.wire.storage_room(needed)
        if ok:
            self.fault = None
            self.c.commit()  # the rows kept pending
            if self.fault is None:
                self.c.warn(
                    "storage",
                    f"writes failed for {now - fault.since:.0f} s ({fault.detail}); "
                    "assignments were paused, no trial was failed",
                )
                self.c.dirty = True
                return True
            self.fault.since = fault.since  # still failing: patience runs from the first
        if now - fault.since > self.c.settings.storage_patience:
            mount, kind = self.c.wire.filesystem()
            root = self.c.paths.root
            raise StorageError(
                f"writes to {root} kept failing for {now - fault.since:.0f} s "
                f"({fault.detail}); its filesystem {mount} ({kind}) has "
                f"{format_bytes(max(free, 0))} free and the study needs at least "
                f"{format_bytes(needed)}; free some space, then `hpctune resume "
                f"{root}` (no trial was failed)"
            )
        return False


__all__ = ["StorageFault", "StorageWatch"]
