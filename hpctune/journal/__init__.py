"""The study's journal: a zarr store written only by the controller, the fold of its log, and
reading it (the public read API is :func:`hpctune.open_study`, :mod:`hpctune.api`)."""

from __future__ import annotations

from hpctune.journal.entities import TrialRecord
from hpctune.journal.reader import JOURNAL_DIR, Curve, StudyReader, load_state, read_study
from hpctune.journal.state import StudyRecord
from hpctune.journal.store import JournalReader, JournalWriter

__all__ = [
    "JOURNAL_DIR",
    "Curve",
    "JournalReader",
    "JournalWriter",
    "StudyReader",
    "StudyRecord",
    "TrialRecord",
    "load_state",
    "read_study",
]
