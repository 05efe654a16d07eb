"""A journal directory per controller epoch, so a fenced controller cannot touch the live one.

Each controller writes the journal in a directory of its own epoch, ``journal-e<N>.zarr``, made
when it takes the epoch (:mod:`hpctune.wire.lease`) from hard links of the previous epoch's files:
zarr replaces every file it writes by renaming a new one into place, so a write in one directory
never changes a file seen from another. The commit record (the group's ``zarr.json``) is linked
first, so the new directory holds one whole commit even while the old controller is writing.
Readers use the directory of the highest epoch (:func:`current_journal`); a fenced controller
may still write into its own directory, which no one reads any more. ``journal.zarr`` is a
symbolic link to the current directory, kept for people and other tools; hpctune never follows
it to find the journal. A study made before epochs has a real ``journal.zarr`` directory: it is
epoch 0 and is renamed ``journal-e00000000.zarr`` when the first controller with epochs starts.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import uuid
from pathlib import Path

from hpctune.errors import JournalError
from hpctune.files import fsync_dir

JOURNAL_DIR = "journal.zarr"
_DIR_RE = re.compile(r"journal-e(\d+)\.zarr$")
_TEMP_SUFFIXES = (".partial", ".tmp")


def epoch_journal(root: Path, epoch: int) -> Path:
    """The journal directory of controller epoch ``epoch``."""
    return Path(root) / f"journal-e{epoch:08d}.zarr"


def journal_dirs(root: Path) -> list[tuple[int, Path]]:
    """The complete epoch journal directories of a study, by epoch."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    found = sorted((int(m.group(1)), n) for n in names if (m := _DIR_RE.match(n)))
    return [(epoch, Path(root) / name) for epoch, name in found]


def current_journal(root: Path) -> Path:
    """The journal directory readers use: the highest epoch's (``journal.zarr`` before any)."""
    dirs = journal_dirs(root)
    return dirs[-1][1] if dirs else Path(root) / JOURNAL_DIR


def branch_journal(root: Path, epoch: int) -> tuple[Path, Path]:
    """Give ``epoch`` its own journal directory, made from the current one.

    The directory is built under a temporary name and renamed into place, so readers never see
    half of it; then ``journal.zarr`` is pointed at it. Returns the new directory and the one
    it was made from (see :func:`prune_journals`).
    """
    root = Path(root)
    target = epoch_journal(root, epoch)
    source = current_journal(root).resolve()
    legacy = not journal_dirs(root)  # a journal made before epochs: it becomes epoch 0's
    if target.is_dir():
        return target, source
    tmp = root / f".{target.name}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        _link_tree(source, tmp)
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_dir(root)
    point_link(root, target)
    return target, epoch_journal(root, 0) if legacy else source


def prune_journals(root: Path, epoch: int, source: Path) -> None:
    """Delete the journal directories of epochs before ``epoch``, except ``source`` (the one
    ``epoch``'s was made from: it may still be read, or written by a controller that has not
    yet noticed it was fenced). Called once the new directory holds a commit of its own."""
    for old_epoch, path in journal_dirs(root):
        if old_epoch < epoch and path.resolve() != Path(source).resolve():
            shutil.rmtree(path, ignore_errors=True)
    for path in Path(root).glob(".journal-e*.zarr.*.tmp"):  # branches of controllers that died
        match = _DIR_RE.match(path.name[1:].split(".zarr.")[0] + ".zarr")
        if match is not None and int(match.group(1)) < epoch:
            shutil.rmtree(path, ignore_errors=True)


def point_link(root: Path, target: Path) -> None:
    """Make ``journal.zarr`` a symbolic link to ``target`` (a real directory there, from a
    study made before epochs, becomes epoch 0's directory first)."""
    link = Path(root) / JOURNAL_DIR
    if link.is_dir() and not link.is_symlink():
        os.rename(link, epoch_journal(root, 0))
    with contextlib.suppress(OSError):
        if os.readlink(link) == target.name:
            return
    tmp = Path(root) / f".{JOURNAL_DIR}.{uuid.uuid4().hex[:8]}.tmp"
    os.symlink(target.name, tmp)
    os.replace(tmp, link)


def _link_tree(source: Path, dest: Path) -> None:
    """Hard-link every file of ``source`` into a new tree ``dest`` (copy where links fail);
    the commit record (``zarr.json`` at the top) first."""
    if not (source / "zarr.json").is_file():
        raise JournalError(
            f"no journal at {source} (its zarr.json is missing); the study directory is "
            "incomplete: restore it from a copy"
        )
    dest.mkdir()
    _link_or_copy(source / "zarr.json", dest / "zarr.json")
    for folder, dirs, files in os.walk(source):
        rel = Path(folder).relative_to(source)
        for name in dirs:
            (dest / rel / name).mkdir(exist_ok=True)
        for name in files:
            if (rel == Path(".") and name == "zarr.json") or name.endswith(_TEMP_SUFFIXES):
                continue
            with contextlib.suppress(FileNotFoundError):  # deleted meanwhile (a resize)
                _link_or_copy(Path(folder) / name, dest / rel / name)


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
            raise
        shutil.copyfile(src, dst)
