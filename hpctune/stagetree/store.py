"""The stage store: checkpoints of stages shared between studies (Hippo §6.2, multi-study).

Studies of the same model, data and code (equal ``[stages]`` digest) publish the checkpoints at
their stages' ends into one directory on the shared filesystem, and a later study's stage tree
resumes from them instead of training those prefixes again. Layout under ``<store>/<digest>/``:

- ``checkpoints/<key>.pt``: the checkpoint file (copied; written under a temporary name and
  renamed into place);
- ``entries/<key>.json``: what it is: the hyperparameter path from step 0 (each node's start
  step and configuration piece), the step, the file's SHA-256 and size, the study and trial
  that trained it, and the study metric's curve up to the step (``[step, time, value]``).

The key is a hash of the path and the step, so equal prefixes from different studies have one
key; an entry is written after its file, so an entry never names a missing file. Many studies
may publish at once: each write is an atomic rename of a complete file. Nothing is ever deleted
by hpctune (remove the directory when the model, data or code change for good).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpctune.files import read_json, sha256_file, write_json_atomic

ENTRY_VERSION = 1

PathJson = list[list[Any]]  # [[start, config piece JSON], ...] from the root


def point_key(path: PathJson, step: int) -> str:
    """The store key of the model state after ``step`` steps along ``path``."""
    text = json.dumps({"path": path, "step": step}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class StoreEntry:
    """One stored checkpoint.

    Attributes:
        key: Its key (:func:`point_key`).
        path: The hyperparameter path from step 0: ``[start, config piece JSON]`` per node.
        step: The step the checkpoint is at.
        file: The checkpoint file.
        sha256: Its SHA-256.
        nbytes: Its size.
        study: The study that trained it.
        trial: The trial (of that study) whose segment saved it.
        curve: ``[step, time, value]`` of the study metric up to ``step``.
    """

    key: str
    path: PathJson
    step: int
    file: Path
    sha256: str
    nbytes: int
    study: str
    trial: int
    curve: list[list[float]]


class StageStore:
    """The stage store of one digest.

    Args:
        root: The store directory (``[stages] store``).
        digest: The studies' shared key (``[stages]`` digest).
    """

    def __init__(self, root: str | Path, digest: str) -> None:
        self.folder = Path(root) / digest
        self.entries_dir = self.folder / "entries"
        self.files_dir = self.folder / "checkpoints"

    def has(self, key: str) -> bool:
        """True if an entry with ``key`` exists."""
        return (self.entries_dir / f"{key}.json").is_file()

    def entries(self) -> list[StoreEntry]:
        """Every complete entry (unreadable or foreign ones are skipped), by key."""
        try:
            names = sorted(self.entries_dir.glob("*.json"))
        except OSError:
            return []
        found = []
        for name in names:
            data = read_json(name)
            if not isinstance(data, dict) or data.get("version") != ENTRY_VERSION:
                continue
            try:
                found.append(
                    StoreEntry(
                        key=str(data["key"]),
                        path=list(data["path"]),
                        step=int(data["step"]),
                        file=self.folder / str(data["file"]),
                        sha256=str(data["sha256"]),
                        nbytes=int(data["nbytes"]),
                        study=str(data["study"]),
                        trial=int(data["trial"]),
                        curve=[list(p) for p in data["curve"]],
                    )
                )
            except (KeyError, TypeError, ValueError):
                continue
        return found

    def publish(
        self,
        path: PathJson,
        step: int,
        source: Path,
        *,
        study: str,
        trial: int,
        curve: list[list[float]],
    ) -> str:
        """Copy ``source`` into the store as the state after ``step`` along ``path``; return
        its key. Publishing a key that exists does nothing."""
        key = point_key(path, step)
        if self.has(key):
            return key
        self.files_dir.mkdir(parents=True, exist_ok=True)
        self.entries_dir.mkdir(parents=True, exist_ok=True)
        target = self.files_dir / f"{key}.pt"
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        shutil.copyfile(source, tmp)
        os.replace(tmp, target)
        entry = {
            "version": ENTRY_VERSION,
            "key": key,
            "path": path,
            "step": step,
            "file": f"checkpoints/{key}.pt",
            "sha256": sha256_file(target),
            "nbytes": target.stat().st_size,
            "study": study,
            "trial": trial,
            "curve": curve,
        }
        write_json_atomic(self.entries_dir / f"{key}.json", entry, fsync=True)
        return key


def link_or_copy(source: Path, target: Path) -> None:
    """Put ``source``'s bytes at ``target`` (a hard link when possible), atomically."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copyfile(source, tmp)
    os.replace(tmp, target)
    tmp.unlink(missing_ok=True)  # rename does nothing when both are links to one file


__all__ = ["StageStore", "StoreEntry", "link_or_copy", "point_key"]
