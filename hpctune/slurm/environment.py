"""The environment hpctune's jobs need, set explicitly so that site export policies do no harm.

Many sites set ``SBATCH_EXPORT=NONE`` (or users pass ``--export=NONE``): a job then starts
without the submitting shell's variables, and ``srun`` inside it inherits
``SLURM_EXPORT_ENV=NONE``, so the job step does not even see what the batch script exported.
hpctune therefore

* writes ``export`` lines for what its processes need into every script it submits: the
  variables in :data:`EXPORTED` and every ``HPCTUNE_*`` setting, as the submitting process has
  them (the Python itself is always called by its absolute path, and the study directory is an
  argument);
* starts job steps with ``srun --export=ALL`` (:data:`SRUN_ARGS`), so that the step gets the
  batch script's environment: these exports and whatever the ``setup`` lines (``module load``)
  set.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping

#: Variables passed on explicitly when set: where Python finds code, where Slurm's clients
#: find the cluster's configuration.
EXPORTED = ("PYTHONPATH", "SLURM_CONF")

#: Arguments of the ``srun`` that starts a job step (worker, curve fit).
SRUN_ARGS = ["--export=ALL"]


def job_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables a job of this study must see, taken from ``env`` (default: ours)."""
    env = os.environ if env is None else env
    names = [n for n in EXPORTED if env.get(n)]
    names += sorted(n for n in env if n.startswith("HPCTUNE_") and n not in names)
    return {n: env[n] for n in names}


def export_lines(env: Mapping[str, str] | None = None) -> list[str]:
    """Shell lines exporting :func:`job_environment` (empty when there is nothing to set)."""
    values = job_environment(env)
    if not values:
        return []
    return ["export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in values.items())]
