"""Run a study's controller whose workers are fake (``FakeExecutor``: their files are written
by a ``FakeFleet`` in another process): ``python fake_fleet_controller.py <study dir>``; with
``--die-submitting`` the process dies (as if SIGKILLed) while it submits its first workers."""

from __future__ import annotations

import os
import sys

from hpctune.backends import Backend, Executor
from hpctune.controller.launch import run_local
from hpctune.spec import StudySpec
from hpctune.study.states import StudyState
from hpctune.testing.fake_workers import FakeExecutor
from hpctune.wire.layout import StudyPaths


class DiesSubmitting(FakeExecutor):
    """Dies in the middle of a submission: the journal holds workers created, none started."""

    def start(
        self, worker_ids: list[str], devices: int | None = None
    ) -> dict[str, dict[str, object]]:
        os._exit(137)


class FakeBackend(Backend):
    """Workers written by a fake fleet in another process."""

    name = "fake"

    def __init__(self, dies: bool) -> None:
        self.dies = dies

    def executor(self, paths: StudyPaths, spec: StudySpec) -> Executor:
        return (DiesSubmitting if self.dies else FakeExecutor)(paths)


if __name__ == "__main__":
    backend = FakeBackend("--die-submitting" in sys.argv)
    with open(os.devnull, "w") as out:
        state = run_local(StudyPaths.of(sys.argv[1]), backend=backend, out=out, poll_interval=0.05)
    sys.exit(0 if state is StudyState.FINISHED else 1)
