"""One controller at a time: a lease with fencing epochs, built from exclusive file creation.

No POSIX lock is used (they are unreliable on NFS, Lustre and GPFS). A controller takes *epoch*
``N`` by creating ``controller/epoch-<N>`` exclusively (``link`` of a new file, atomic on every
shared filesystem; on NFS a lost reply is recognised by the link count). Epochs are taken in
order: a controller takes one more than the highest it lists, so epoch ``N + 1`` exists whenever
any epoch above ``N`` does. The holder of the highest epoch is the only controller allowed to act:

* it writes its journal into a directory of its own epoch (:mod:`hpctune.journal.epochs`), so a
  fenced controller can never write into the journal everyone reads;
* before and after every commit, before it starts or cancels a worker, and at every iteration it
  checks that no higher epoch exists (:meth:`Lease.check`); if one does it raises :class:`Fenced`
  and stops without committing, writing files or touching workers;
* assignment and decision files carry the epoch, and workers ignore files of an epoch lower than
  the highest one they know of.

Taking over (:func:`acquire`) is refused while the holder of the highest epoch may be alive
(:func:`rival`): on the same host its pid decides, whatever the heartbeat's age (a stopped
process is alive); on another host its heartbeat (``controller.json``, every 2 s) decides, with
:data:`LEASE_TIMEOUT`. An earlier run of the same Slurm job (a requeue) is never a rival, nor is a
controller that ended or detached. ``force=True`` takes the next epoch anyway, which fences the
holder. See docs/journal.md ("One controller at a time").
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpctune.errors import HpctuneError, UsageError
from hpctune.files import dumps, fsync_dir, read_json

if TYPE_CHECKING:
    from hpctune.wire.layout import StudyPaths

LEASE_TIMEOUT = 30.0  # seconds: a heartbeat older than this is dead (other hosts only)
EPOCH_DIR = "controller"
_EPOCH_RE = re.compile(r"epoch-(\d+)$")


def epoch_dir(root: Path) -> Path:
    """The folder of the epoch files of a study directory."""
    return Path(root) / EPOCH_DIR


def epoch_file(root: Path, epoch: int) -> Path:
    """The file that marks epoch ``epoch`` as taken."""
    return epoch_dir(root) / f"epoch-{epoch:08d}"


def list_epochs(root: Path) -> list[int]:
    """Every epoch taken in a study directory, in increasing order.

    Lists the folder (``opendir`` revalidates a directory's cached attributes on NFS) and also
    looks up the name after the highest listed one, so a new epoch is seen at once.
    """
    try:
        names = os.listdir(epoch_dir(root))
    except (FileNotFoundError, NotADirectoryError):
        return []
    epochs = sorted(int(m.group(1)) for n in names if (m := _EPOCH_RE.match(n)))
    top = epochs[-1] if epochs else 0
    while epoch_file(root, top + 1).exists():  # a lookup by name: not served from a listing
        top += 1
        epochs.append(top)
    return epochs


def highest_epoch(root: Path) -> int:
    """The highest epoch taken (0 when no controller ever started)."""
    epochs = list_epochs(root)
    return epochs[-1] if epochs else 0


@dataclass(frozen=True)
class Holder:
    """The controller that took an epoch, as its epoch file and heartbeat describe it.

    Attributes:
        epoch: The epoch.
        pid: Its process id (None for a fence without a controller, from ``--force``).
        host: Its host.
        job: Its Slurm job id, or None.
        restart: Its Slurm job's restart count (``SLURM_RESTART_COUNT``, 0 before a requeue).
        taken: When it took the epoch (its clock).
        beat: Its last heartbeat (its clock), or ``taken`` before the first.
        state: The state of its last heartbeat (``running``, ``detached``, ``ended``, ...).
        fence: True for an epoch taken only to fence the holder before it (``resume --force``
            on Slurm, before the new controller job runs).
    """

    epoch: int
    pid: int | None
    host: str
    job: str | None
    restart: int
    taken: float
    beat: float
    state: str
    fence: bool = False

    def describe(self) -> str:
        """Name it for a message: its Slurm job, pid and host."""
        if self.fence:
            return f"a fence taken by `hpctune resume --force` on {self.host}"
        where = f"pid {self.pid} on {self.host}"
        return f"Slurm job {self.job} ({where})" if self.job else where


def _identity() -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "job": os.environ.get("SLURM_JOB_ID") or None,
        "restart": _restart_count(),
        "uid": os.geteuid(),
    }


def _restart_count() -> int:
    try:
        return int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    except ValueError:
        return 0


def holder(root: Path, epoch: int | None = None) -> Holder | None:
    """Describe the holder of ``epoch`` (default: the highest), or None when no epoch exists."""
    if epoch is None:
        epoch = highest_epoch(root)
        if epoch == 0:
            return None
    path = epoch_file(root, epoch)
    data = read_json(path)
    if not isinstance(data, dict):  # written by exclusive open without link: not filled yet
        try:
            taken = path.stat().st_mtime
        except OSError:
            return None
        data = {"time": taken}
    taken = float(data.get("time") or 0.0)
    beat, state = taken, "running"
    heartbeat = read_json(Path(root) / "controller.json")
    if isinstance(heartbeat, dict) and heartbeat.get("epoch") == epoch:
        state = str(heartbeat.get("state") or "running")
        beat = float(heartbeat.get("time") or 0.0)
        if beat == 0.0:
            state = "ended"
    pid = data.get("pid")
    return Holder(
        epoch=epoch,
        pid=None if pid is None else int(pid),
        host=str(data.get("host") or "?"),
        job=None if data.get("job") is None else str(data["job"]),
        restart=int(data.get("restart") or 0),
        taken=taken,
        beat=beat,
        state=state,
        fence=bool(data.get("fence", False)),
    )


def lease_timeout() -> float:
    """Seconds after which a controller on another host whose heartbeat stopped is dead:
    ``HPCTUNE_LEASE_TIMEOUT``, default :data:`LEASE_TIMEOUT`."""
    try:
        return float(os.environ.get("HPCTUNE_LEASE_TIMEOUT", LEASE_TIMEOUT))
    except ValueError:
        return LEASE_TIMEOUT


def rival(root: Path, *, timeout: float | None = None, now: float | None = None) -> Holder | None:
    """The holder of the highest epoch if it may still be alive and acting, else None.

    Not a rival: no epoch yet, a fence, a controller that ended or detached, an earlier run of
    this process's own Slurm job (a requeue), and a controller object of this very process. On
    this host a controller is alive while its pid is (a SIGSTOPped one too); on another host
    while its heartbeat is younger than ``timeout`` seconds (default :func:`lease_timeout`).
    """
    found = holder(root) or _legacy_holder(root)
    if found is None or found.fence or found.state in ("ended", "detached"):
        return None
    me = _identity()
    if found.job and found.job == me["job"] and found.restart < me["restart"]:
        return None  # Slurm runs a job once at a time: its earlier run was requeued
    if found.host == me["host"]:
        if found.pid == me["pid"]:
            return None  # an earlier controller of this process (its caller runs one at a time)
        return found if found.pid is not None and _pid_alive(found.pid, found.taken) else None
    now = time.time() if now is None else now
    limit = lease_timeout() if timeout is None else timeout
    return found if now - found.beat <= limit else None


def _legacy_holder(root: Path) -> Holder | None:
    """A controller of a version without epochs, from its ``controller.json`` (epoch 0)."""
    data = read_json(Path(root) / "controller.json")
    if not isinstance(data, dict) or "epoch" in data or not data.get("pid"):
        return None
    beat = float(data.get("time") or 0.0)
    state = "ended" if beat == 0.0 else str(data.get("state") or "running")
    return Holder(
        epoch=0,
        pid=int(data["pid"]),
        host=str(data.get("host") or "?"),
        job=None if data.get("job") is None else str(data["job"]),
        restart=0,
        taken=beat,
        beat=beat,
        state=state,
    )


def _pid_alive(pid: int, since: float) -> bool:
    """True if ``pid`` runs and started before ``since`` (else the pid was reused)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: alive
    started = _process_start(pid)
    return started is None or started <= since + 2.0


def _process_start(pid: int) -> float | None:
    """The Unix time a process started (Linux ``/proc``), or None if unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        if stat[0] == "Z":
            return 0.0  # a zombie: finished, its pid not yet reaped; started long ago
        ticks = int(stat[19])
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime")
        )
    except (OSError, IndexError, ValueError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


class LeaseHeld(UsageError):
    """Another controller holds a live lease on the study (exit 2).

    Attributes:
        holder: The controller that holds it.
    """

    def __init__(self, root: Path, held: Holder, *, now: float | None = None) -> None:
        self.holder = held
        age = (time.time() if now is None else now) - held.beat
        beat = f"heartbeat {age:.0f} s ago"
        if held.host == socket.gethostname() and age > lease_timeout():
            beat += " but its process is alive: it may be stopped (Ctrl-Z); `fg` or kill it"
        super().__init__(
            f"a controller is running on {root}: {held.describe()}, epoch {held.epoch} "
            f"({beat}); stop it with `hpctune stop {root}` and wait, or take over with "
            f"`hpctune resume {root} --force`, which fences it (it stops at its next commit "
            "without committing)"
        )


class Fenced(HpctuneError):
    """This controller's epoch was superseded: another controller took over the study.

    Attributes:
        epoch: This controller's epoch.
        by: The controller of the higher epoch (None if its file could not be read).
    """

    exit_code = 1

    def __init__(self, root: Path, epoch: int, by: Holder | None) -> None:
        self.epoch = epoch
        self.by = by
        who = by.describe() if by is not None else "another controller"
        top = by.epoch if by is not None else epoch + 1
        super().__init__(
            f"this controller (epoch {epoch}) was fenced: {who} took over {root} with epoch "
            f"{top}; it stopped without committing (the study goes on under the new one)"
        )


class Lease:
    """An epoch held by this process: the right to act on a study until a higher one exists.

    Args:
        root: The study directory.
        epoch: The epoch taken.
    """

    def __init__(self, root: Path, epoch: int) -> None:
        self.root = Path(root)
        self.epoch = epoch

    def check(self) -> None:
        """Raise :class:`Fenced` if a higher epoch exists."""
        if epoch_file(self.root, self.epoch + 1).exists() or highest_epoch(self.root) > self.epoch:
            raise Fenced(self.root, self.epoch, holder(self.root, self.epoch + 1))

    @property
    def valid(self) -> bool:
        """True while no higher epoch exists."""
        try:
            self.check()
        except Fenced:
            return False
        return True


def acquire(root: Path, *, force: bool = False) -> Lease:
    """Take the next epoch of a study for this process.

    Raises:
        LeaseHeld: Another controller holds a live lease (and ``force`` is False), or kept
            winning the race for the next epoch.
    """
    root = Path(root)
    epoch_dir(root).mkdir(exist_ok=True)
    for _ in range(20):
        top = highest_epoch(root)
        other = rival(root)
        if other is not None and not force:
            raise LeaseHeld(root, other)
        epoch = top + 1
        if create_exclusive(epoch_file(root, epoch), {"epoch": epoch, **_identity()}):
            return Lease(root, epoch)
    raise LeaseHeld(root, holder(root) or Holder(0, None, "?", None, 0, 0.0, 0.0, "running"))


def fence(root: Path) -> int:
    """Take the next epoch without a controller (``resume --force`` before a Slurm job starts):
    the holder is fenced and the next controller is free to start. Returns the epoch."""
    root = Path(root)
    epoch_dir(root).mkdir(exist_ok=True)
    while True:
        epoch = highest_epoch(root) + 1
        data = {"epoch": epoch, **_identity(), "fence": True}
        if create_exclusive(epoch_file(root, epoch), data):
            return epoch


def create_exclusive(path: Path, data: dict[str, Any]) -> bool:
    """Create ``path`` holding ``data`` (JSON) only if it does not exist; True if created.

    The content is written to a temporary file and hard-linked to ``path``: ``link`` fails if
    the name exists, atomically on NFS, Lustre and GPFS, and the file is complete when it
    appears. If the reply of ``link`` is lost (NFS), the temporary file's link count says
    whether it worked. Where hard links are not allowed, ``O_CREAT | O_EXCL`` is used.
    """
    data = {**data, "time": time.time()}
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    with open(tmp, "wb") as f:
        f.write(dumps(data).encode())
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, path)
        created = True
    except FileExistsError:
        created = False
    except OSError as exc:
        try:
            created = os.stat(tmp).st_nlink == 2  # the link was made; its reply was lost
        except OSError:
            created = False
        if not created and exc.errno in (errno.EPERM, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
            # no hard links on this filesystem: an exclusive create (atomic, not filled at once)
            created = _create_excl_open(path, dumps(data).encode())
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    fsync_dir(path.parent)
    return created


def _create_excl_open(path: Path, body: bytes) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    return True


def controller_alive(paths: StudyPaths) -> dict[str, Any] | None:
    """Describe the controller holding a live lease on the study, else ``None``.

    A dict with ``epoch``, ``pid``, ``host``, ``job`` and ``time`` (its last heartbeat).
    """
    found = rival(paths.root)
    if found is None:
        return None
    return {
        "epoch": found.epoch,
        "pid": found.pid,
        "host": found.host,
        "job": found.job,
        "time": found.beat,
        "state": found.state,
    }
