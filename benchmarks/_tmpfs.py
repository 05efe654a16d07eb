"""A real full disk for fault tests: a small tmpfs in a private mount namespace, filled on demand.

``tmpfs_command`` wraps a command so that it runs with a fresh tmpfs of ``size_mb`` MiB mounted
at ``mount`` (``unshare --user --map-root-user --mount``: no root needed where user namespaces
are allowed, and nothing is left mounted afterwards). Inside, :func:`fill` writes a filler file
until the kernel answers ENOSPC, so every write of the study in that tmpfs (checkpoints, event
lines, journal chunks, small files) fails as it would on a full shared filesystem, until
:func:`free` removes the filler. No stand-in, no LD_PRELOAD.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

_SCRIPT = 'mount -t tmpfs -o size="$1"m hpctune-faults "$2" && shift 2 && exec "$@"'


def tmpfs_command(mount: Path, size_mb: int, argv: list[str]) -> list[str]:
    """``argv`` run in a new mount namespace with a tmpfs of ``size_mb`` MiB at ``mount``."""
    mount.mkdir(parents=True, exist_ok=True)
    return [
        "unshare",
        "--user",
        "--map-root-user",
        "--mount",
        "sh",
        "-c",
        _SCRIPT,
        "sh",
        str(size_mb),
        str(mount),
        *argv,
    ]


def fill(mount: Path) -> Path:
    """Write a filler file in ``mount`` until the filesystem is full; return its path."""
    path = mount / ".hpctune-filler"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    block = b"\0" * 65536
    try:
        while True:
            try:
                written = os.write(fd, block)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(block) == 1:
                    return path
                block = block[: len(block) // 2]  # fill the last pages too
                continue
            if written < len(block):
                block = block[: max(len(block) // 2, 1)]
    finally:
        os.close(fd)


def free(filler: Path) -> None:
    """Remove the filler: the filesystem has room again."""
    filler.unlink(missing_ok=True)
