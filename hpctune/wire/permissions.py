"""Private study directories: file modes whatever the umask, and refusing what others can change.

Every hpctune process that writes into a study directory (``launch``, ``resume``, the controller,
each worker) sets its umask to :func:`study_umask`: files 0600 and folders 0700, or 0640/0750
with ``[study] share_with_group = true``; never writable by group or others. Before they act,
they refuse (:class:`~hpctune.errors.AccessError`, exit 2) a study directory that is writable by
group or others or owned by another user, and so does a worker for a file it is about to import
(the entry point) or load (a checkpoint): anyone who can change such a file can run code as the
study's owner. Files owned by root are trusted (root can change anything anyway).
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

from hpctune.errors import AccessError

PRIVATE_UMASK = 0o077
GROUP_UMASK = 0o027
# Folders of a study directory checked when the directory itself is open to group or others.
_CHECKED_FOLDERS = (
    "controller",
    "workers",
    "decisions",
    "inbox",
    "events",
    "checkpoints",
    "curves",
    "logs",
    "slurm",
)


def study_umask(share_with_group: bool) -> int:
    """The umask of processes writing into a study directory."""
    return GROUP_UMASK if share_with_group else PRIVATE_UMASK


def use_study_umask(share_with_group: bool) -> None:
    """Set this process's umask for a study directory (see :func:`study_umask`)."""
    os.umask(study_umask(share_with_group))


def use_umask_of(root: Path) -> None:
    """Set this process's umask for an existing study directory: shared with the group if the
    directory is (``launch`` made it so from ``[study] share_with_group``)."""
    try:
        shared = bool(os.stat(root).st_mode & stat.S_IRWXG)
    except OSError:
        shared = False
    use_study_umask(shared)


def user_name(uid: int) -> str:
    """A user for a message: ``name (uid N)``."""
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _check(path: Path, what: str, *, root_ok: bool, fix_target: Path) -> None:
    """Refuse ``path`` if it is writable by group or others or not owned by this user."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise AccessError(path, f"{what} {path} cannot be read: {exc.strerror}") from exc
    me = os.geteuid()
    if info.st_uid != me and not (root_ok and info.st_uid == 0):
        raise AccessError(
            path,
            f"{what} {path} is owned by {user_name(info.st_uid)}, not by you ({user_name(me)}); "
            "hpctune runs only what you own, since its owner could change what runs as you: "
            "use your own copy",
        )
    writable = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if writable:
        who = " and ".join(
            name
            for bit, name in ((stat.S_IWGRP, "group"), (stat.S_IWOTH, "others"))
            if writable & bit
        )
        recursive = "-R " if stat.S_ISDIR(info.st_mode) else ""
        raise AccessError(
            path,
            f"{what} {path} is writable by {who} (mode {stat.S_IMODE(info.st_mode):04o}): "
            f"they could change what runs as you; fix it with `chmod {recursive}go-w "
            f"{fix_target}`",
        )


def check_study_dir(root: Path) -> None:
    """Refuse a study directory that another account could change.

    The directory must be owned by this user and not writable by group or others; when group
    or others may enter it, its folders (and their folders one level down) are checked too.

    Raises:
        AccessError: Naming the path and the ``chmod`` that fixes it.
    """
    root = Path(root)
    _check(root, "the study directory", root_ok=False, fix_target=root)
    try:
        mode = stat.S_IMODE(os.stat(root).st_mode)
    except OSError:
        return
    if not mode & 0o011:  # nobody else can enter it: nothing inside is reachable
        return
    for name in _CHECKED_FOLDERS:
        folder = root / name
        _check(folder, "the study folder", root_ok=False, fix_target=root)
        try:
            children = [p for p in folder.iterdir() if p.is_dir()]
        except OSError:
            continue
        for child in children:
            _check(child, "the study folder", root_ok=False, fix_target=root)


def check_loadable(path: Path, what: str) -> None:
    """Refuse a file about to be imported or loaded that another account could change.

    Raises:
        AccessError: The file is writable by group or others, or owned by another user than
            this one or root.
    """
    _check(Path(path), what, root_ok=True, fix_target=Path(path))
