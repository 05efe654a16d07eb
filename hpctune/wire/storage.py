"""Transient storage faults: a full disk, an exhausted quota, I/O errors on a shared filesystem.

Such a write failure is nobody's trial's fault. The worker ends the segment ``suspended`` (its
trial resumes from its last checkpoint, no retry counted); the controller pauses new assignments
and tries again, and gives up (exit 1) only after ``STORAGE_PATIENCE`` seconds, naming the
filesystem and the free space it needs. Kept free of heavy imports (workers use it).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO})


def storage_error(exc: BaseException | None) -> OSError | None:
    """The ENOSPC, EDQUOT or EIO error in ``exc``'s chain (cause and context), if any."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS:
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def describe(exc: OSError, what: str = "") -> str:
    """``"no space left on device (ENOSPC) writing <what>"``, for reasons and logs."""
    name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    text = os.strerror(exc.errno) if exc.errno else str(exc)
    target = what or (str(exc.filename) if exc.filename else "")
    return f"{text.lower()} ({name})" + (f" writing {target}" if target else "")


def filesystem_of(path: Path) -> tuple[str, str]:
    """The mount point and filesystem type holding ``path`` (from ``/proc/self/mounts``)."""
    target = os.path.realpath(path)
    best, kind = "/", "?"
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return best, kind
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        mount = parts[1].replace("\\040", " ")
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, kind = mount, parts[2]
    return best, kind


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged user may still write on the filesystem of ``path`` (-1: unknown)."""
    try:
        stat = os.statvfs(path)
    except OSError:
        return -1
    return stat.f_bavail * stat.f_frsize


def format_bytes(n: float) -> str:
    """``12.3 MiB`` style."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover
