"""The study's journal: a zarr store written only by the controller, and its read API."""

from __future__ import annotations

from hpctune.journal.reader import JOURNAL_DIR, Curve, Study, load_state, open_study
from hpctune.journal.state import StudyRecord, TrialRecord
from hpctune.journal.store import JournalReader, JournalWriter

__all__ = [
    "JOURNAL_DIR",
    "Curve",
    "JournalReader",
    "JournalWriter",
    "Study",
    "StudyRecord",
    "TrialRecord",
    "load_state",
    "open_study",
]
