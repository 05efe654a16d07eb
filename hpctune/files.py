"""Small-file primitives for a shared filesystem: atomic writes, JSON files, checksums.

Every small file hpctune writes goes to a temporary name in the same folder and is renamed into
place, so a reader sees the old content or the new one, never a torn one. No correctness depends
on POSIX locks (they are unreliable on NFS).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


def fsync_dir(path: Path) -> None:
    """Flush a directory entry (after a rename) where the OS allows it."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_open(path: Path, *, fsync: bool = False) -> Iterator[IO[bytes]]:
    """Open a temporary file next to ``path`` for writing; rename it to ``path`` on success.

    On an exception the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        with open(tmp, "wb") as f:
            yield f
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path next to ``path`` to build a file or a folder at; on success it
    replaces ``path`` (a folder there is removed first), on an exception it is removed, so
    nothing half-written is ever left at ``path`` (exports, reports)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        yield tmp
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                tmp.unlink()
        raise


def write_bytes_atomic(path: Path, data: bytes, *, fsync: bool = False) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_open(path, fsync=fsync) as f:
        f.write(data)


def dumps(obj: Any) -> str:
    """Serialise ``obj`` as compact JSON, keys in insertion order (NaN and inf allowed)."""
    return json.dumps(obj, separators=(",", ":"), default=_json_default)


def write_json_atomic(path: Path, obj: Any, *, fsync: bool = False) -> None:
    """Write ``obj`` as JSON to ``path`` atomically."""
    write_bytes_atomic(path, dumps(obj).encode(), fsync=fsync)


def read_json(path: Path) -> Any | None:
    """Return the JSON content of ``path``, or ``None`` if it does not exist or is unreadable."""
    try:
        return json.loads(Path(path).read_bytes())
    except (FileNotFoundError, ValueError, OSError):
        return None


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Return the hex SHA-256 of a file's content."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _json_default(obj: Any) -> Any:
    """Turn numpy scalars and arrays, paths and enums into JSON values."""
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "shape", None) == ():
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "value"):
        return obj.value
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def finite_or_none(value: float) -> float | None:
    """Return ``value`` if it is finite, else ``None``."""
    return value if math.isfinite(value) else None
