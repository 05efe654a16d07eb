"""The layout of a study directory: one place that names every file.

```
<study>/
  study.toml            the spec as launched (copy)          written once by `hpctune launch`
  journal-e<N>.zarr/    the journal of controller epoch N    that epoch's controller only
  journal.zarr          a symbolic link to the current one   the controller
  controller/epoch-<N>  controller N's lease (pid, host)     created once, exclusively
  controller.json       controller heartbeat (pid, host)     controller only
  events/segment-<S>.jsonl   a segment's event lines         the worker running segment S
  workers/<W>/heartbeat.json                                 worker W
  workers/<W>/assignment.json   W's current assignment       controller
  decisions/segment-<S>.json    latest decision for S        controller
  inbox/<time>-<id>.json        user commands                `hpctune stop`; controller deletes
  checkpoints/trial-<TTTTTT>/step-<NNNNNNNN>-segment-<SSSSSS>.pt              the worker running S
  curves/trial-<TTTTTT>-n<NNNNNNNN>.json    a learning-curve fit    a pool process or array task
  logs/controller.log, logs/workers/<W>.log, logs/trials/trial-<TTTTTT>.out|.err
  profile.json          the workload's profile (elastic planning)  `hpctune profile study.toml`
  profile/size-<G>/     the short study that timed G devices/trial  `hpctune profile study.toml`
```

``hpctune profile study.toml`` may make ``profile.json`` and ``profile/`` before the study is
launched; ``hpctune launch`` then creates the study around them
(:func:`hpctune.controller.launch.create_study`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hpctune.journal.epochs import current_journal


def checkpoint_path(trial_id: int, step: int, segment_id: int) -> str:
    """Where segment ``segment_id`` of trial ``trial_id`` saves its checkpoint at ``step``,
    relative to the study directory (as the journal names it): the one place that names it."""
    return f"checkpoints/{_trial_folder(trial_id)}/step-{step:08d}-segment-{segment_id:06d}.pt"


def _trial_folder(trial_id: int) -> str:
    """The name of the checkpoint folder of trial ``trial_id``."""
    return f"trial-{trial_id:06d}"


@dataclass(frozen=True)
class StudyPaths:
    """Paths inside one study directory."""

    root: Path

    @classmethod
    def of(cls, root: str | Path) -> StudyPaths:
        """Return the paths of the study directory ``root`` (made absolute)."""
        return cls(Path(root).resolve())

    @property
    def journal(self) -> Path:
        """The current journal directory: the highest controller epoch's (``journal.zarr``
        links to it; :mod:`hpctune.journal.epochs`)."""
        return current_journal(self.root)

    @property
    def epochs(self) -> Path:
        """The controller epoch files (:mod:`hpctune.wire.lease`)."""
        return self.root / "controller"

    @property
    def spec_copy(self) -> Path:
        """The study.toml as launched (``study.toml``)."""
        return self.root / "study.toml"

    @property
    def controller_file(self) -> Path:
        """The controller heartbeat of versions without epochs (``controller.json``)."""
        return self.root / "controller.json"

    @property
    def events(self) -> Path:
        """The segments' event files (``events/segment-<S>.jsonl``)."""
        return self.root / "events"

    @property
    def workers(self) -> Path:
        """One folder per worker: its heartbeat and assignment."""
        return self.root / "workers"

    @property
    def decisions(self) -> Path:
        """The controller's decisions, one file per segment."""
        return self.root / "decisions"

    @property
    def inbox(self) -> Path:
        """User commands for the controller (:mod:`hpctune.wire.inbox`)."""
        return self.root / "inbox"

    @property
    def checkpoints(self) -> Path:
        """Checkpoint files, one folder per trial."""
        return self.root / "checkpoints"

    @property
    def curves(self) -> Path:
        """Learning-curve result files (``hpctune.curves.service.result_path``)."""
        return self.root / "curves"

    @property
    def profile(self) -> Path:
        """The elastic planner's profile (``hpctune profile``; ``plan-elastic``'s default)."""
        return self.root / "profile.json"

    @property
    def profile_runs(self) -> Path:
        """The short studies ``hpctune profile study.toml`` ran, one per size."""
        return self.root / "profile"

    @property
    def logs(self) -> Path:
        """The controller's, workers' and trials' logs."""
        return self.root / "logs"

    @property
    def controller_log(self) -> Path:
        """The controller's log (``logs/controller.log``)."""
        return self.logs / "controller.log"

    def event_file(self, segment_id: int) -> Path:
        """The event file of segment ``segment_id``."""
        return self.events / f"segment-{segment_id:06d}.jsonl"

    def worker_dir(self, worker_id: str) -> Path:
        """The folder of worker ``worker_id``."""
        return self.workers / worker_id

    def heartbeat(self, worker_id: str) -> Path:
        """The heartbeat file worker ``worker_id`` rewrites."""
        return self.workers / worker_id / "heartbeat.json"

    def assignment(self, worker_id: str) -> Path:
        """The assignment file the controller writes for worker ``worker_id``."""
        return self.workers / worker_id / "assignment.json"

    def decision(self, segment_id: int) -> Path:
        """The decision file of segment ``segment_id``."""
        return self.decisions / f"segment-{segment_id:06d}.json"

    def trial_checkpoints(self, trial_id: int) -> Path:
        """The checkpoint folder of trial ``trial_id``."""
        return self.checkpoints / _trial_folder(trial_id)

    def checkpoint_trials(self) -> list[int]:
        """The trials that have a folder of :meth:`trial_checkpoints` (none if unreadable)."""
        try:
            names = [p.name for p in self.checkpoints.iterdir() if p.is_dir()]
        except OSError:
            return []
        return sorted(int(n[6:]) for n in names if n.startswith("trial-") and n[6:].isdigit())

    def checkpoint_file(self, trial_id: int, step: int, segment_id: int) -> Path:
        """Where segment ``segment_id`` of trial ``trial_id`` saves its checkpoint at ``step``."""
        return self.root / checkpoint_path(trial_id, step, segment_id)

    def imported_checkpoint(self, trial_id: int, step: int, key: str) -> Path:
        """A checkpoint taken from the stage store (``key``) for a trial."""
        return self.trial_checkpoints(trial_id) / f"step-{step:08d}-store-{key}.pt"

    def worker_log(self, worker_id: str) -> Path:
        """The log of worker ``worker_id``."""
        return self.logs / "workers" / f"{worker_id}.log"

    def trial_output(self, trial_id: int, stream: str) -> Path:
        """``stream`` is ``"out"`` or ``"err"``."""
        return self.logs / "trials" / f"trial-{trial_id:06d}.{stream}"

    def relative(self, path: Path) -> str:
        """Return ``path`` relative to the study directory, as stored in the journal."""
        return str(Path(path).resolve().relative_to(self.root))

    def make_dirs(self) -> None:
        """Create the study's folders (idempotent)."""
        for folder in (
            self.events,
            self.workers,
            self.decisions,
            self.inbox,
            self.checkpoints,
            self.logs / "workers",
            self.logs / "trials",
        ):
            folder.mkdir(parents=True, exist_ok=True)
