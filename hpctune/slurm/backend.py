"""The Slurm backend: workers as job arrays, the controller as a requeueable batch job.

hpctune finds it by name (``"slurm"``, :mod:`hpctune.plugins`); it is chosen when ``sbatch`` is
on PATH and the command has no ``--local``. Its parts import submitit and talk to Slurm only
when a method needs them (imports inside the methods keep ``hpctune`` commands that never touch
Slurm from loading submitit: start-up time).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hpctune.backends.base import Backend, Executor
from hpctune.curves.fitter import FitOptions
from hpctune.curves.service import FitBackend
from hpctune.journal.state import StudyRecord
from hpctune.slurm.options import SECTION, parse_slurm, slurm_spec, with_slurm
from hpctune.spec import StudySpec
from hpctune.study.states import StudyState
from hpctune.wire.layout import StudyPaths


class SlurmBackend(Backend):
    """Workers as Slurm jobs (submitit job arrays), the controller as a batch job that requeues
    itself; ``[slurm]`` and ``[slurm.controller]`` say what the jobs ask for."""

    name = "slurm"
    title = "Slurm"
    section = SECTION
    runs_controller_here = False
    cluster = True

    def available(self) -> bool:
        """``sbatch`` is on PATH."""
        return shutil.which("sbatch") is not None

    def parse_options(self, table: Mapping[str, Any], source: Path) -> dict[str, Any]:
        """Check ``[slurm]`` (:func:`~hpctune.slurm.options.parse_slurm`)."""
        return parse_slurm(table, source).to_dict()

    def executor(self, paths: StudyPaths, spec: StudySpec) -> Executor:
        """Workers as Slurm jobs through submitit."""
        from hpctune.slurm.executor import SlurmExecutor  # submitit: only when used

        return SlurmExecutor(paths.root, spec)

    def fit_backend(
        self, paths: StudyPaths, spec: StudySpec, options: FitOptions
    ) -> Callable[[], FitBackend] | None:
        """Curve fits as Slurm job arrays, built when first needed (``sbatch`` on PATH)."""
        if not self.available():
            return None

        def build() -> FitBackend:
            from hpctune.slurm.curve_fits import SlurmArrayBackend, curve_job_parameters

            job = slurm_spec(spec).controller
            parameters = curve_job_parameters(spec.name, job, spec.curves)
            return SlurmArrayBackend(paths.root / "slurm" / "curves", parameters, options)

        return build

    def in_job(self) -> bool:
        """This process runs in a Slurm job."""
        return "SLURM_JOB_ID" in os.environ

    def check(self, spec: StudySpec, source: Path | None = None) -> None:
        """``sbatch --test-only`` of the controller's and the workers' jobs."""
        from hpctune.slurm.checks import check_jobs

        check_jobs(spec, source)

    def describe(self, spec: StudySpec) -> list[str]:
        """The controller's sbatch script and the workers' submitit parameters."""
        from hpctune.slurm.cluster import resolve_times
        from hpctune.slurm.controller_job import render_controller_script
        from hpctune.slurm.executor import worker_parameters

        resolved = resolve_times(spec)
        return [
            "",
            "controller job (sbatch script):",
            render_controller_script(StudyPaths.of(spec.directory), resolved),
            "worker jobs (submitit SlurmExecutor parameters, one job array per batch):",
            json.dumps(worker_parameters(resolved), indent=2),
        ]

    def submit_controller(self, paths: StudyPaths, spec: StudySpec) -> str:
        """Write ``slurm/controller.sbatch`` and submit it."""
        from hpctune.slurm.controller_job import submit_controller

        return submit_controller(paths, spec)

    def controller_queued(self, paths: StudyPaths) -> str | None:
        """The study's last controller job while Slurm still has it."""
        if shutil.which("squeue") is None:
            return None
        from hpctune.slurm.controller_job import queued_controller

        return queued_controller(paths)

    def run_controller(self, paths: StudyPaths) -> StudyState:
        """Run the controller in its batch job (what ``controller.sbatch`` runs)."""
        from hpctune.slurm.controller_job import run_in_job

        return run_in_job(paths, self)

    def status(
        self, paths: StudyPaths, record: StudyRecord, controller_alive: bool
    ) -> dict[str, Any] | None:
        """The controller job and worker jobs in the queue, failing submissions."""
        if shutil.which("squeue") is None or not (paths.root / "slurm").is_dir():
            return None
        from hpctune.slurm.status import slurm_status

        return slurm_status(paths, record, controller_alive)

    def status_lines(self, status: Mapping[str, Any], root: str) -> list[str]:
        """:meth:`status` as text."""
        from hpctune.slurm.status import status_lines

        return status_lines(dict(status), root)

    def allocated_seconds(self, record: StudyRecord) -> float | None:
        """What ``sacct`` says the worker jobs held."""
        from hpctune.slurm.accounting import sacct_allocated_s

        return sacct_allocated_s(record)

    def change_settings(
        self, spec: StudySpec, assignments: Sequence[str], other: StudySpec | None
    ) -> tuple[StudySpec, dict[str, Any] | None, list[str]] | None:
        """``resume --set KEY=VALUE`` (``controller.KEY`` for ``[slurm.controller]``) and
        ``--spec FILE``'s ``[slurm]``."""
        from hpctune.slurm import settings

        if not assignments and other is None:
            return None
        old = slurm_spec(spec)
        slurm, sources, lines = old, [], []
        if other is not None:
            slurm = slurm_spec(other)
            sources.append(f"--spec {other.source}")
            skip = (SECTION, "source", "directory")
            mine = {k: v for k, v in spec.to_dict().items() if k not in skip}
            if {k: v for k, v in other.to_dict().items() if k not in skip} != mine:
                lines.append(
                    f"note: only [slurm] and [slurm.controller] are taken from {other.source}; "
                    "the search space, policy and other settings stay as the study has them"
                )
        if assignments:
            slurm = settings.apply_assignments(slurm, settings.parse_assignments(assignments))
            sources.append("--slurm " + " ".join(assignments))
        diff = settings.differences(old, slurm)
        if not diff:
            return spec, None, [*lines, "[slurm] settings unchanged"]
        lines += [f"[slurm] {key}: {a!r} -> {b!r}" for key, (a, b) in diff.items()]
        command = settings.command(slurm, old, "; ".join(sources))
        return with_slurm(spec, slurm), command, lines

    def billing_weight(
        self, spec: StudySpec, partition: str | None, gpu: bool
    ) -> tuple[float, str]:
        """The partition's ``TRESBillingWeights`` per device of the study's workers."""
        from hpctune.slurm.cluster import partition_billing

        return partition_billing(spec, partition, gpu=gpu)


__all__ = ["SlurmBackend"]
