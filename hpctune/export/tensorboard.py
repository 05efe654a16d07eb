"""TensorBoard event files of a study: one run folder per trial (needs ``tensorboard``).

``out/trial-000003/`` holds the trial's scalars (every metric by step, at the time it was
reported) and its configuration as hyperparameters (``add_hparams``: searched columns as
numbers or text, fixed parameters and schedules as text), so TensorBoard's HParams view lists
the trials side by side. ``tensorboard --logdir out`` shows them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpctune.errors import UsageError
from hpctune.files import atomic_path
from hpctune.journal.best import trial_value
from hpctune.study.formatting import format_value

if TYPE_CHECKING:
    from hpctune.journal.reader import StudyReader


def _hparam(value: Any) -> Any:
    if isinstance(value, bool | int | float | str):
        return value
    return format_value(value)


def write_tensorboard(study: StudyReader, out: Path) -> list[Path]:
    """Write one event-file folder per trial under ``out`` (built beside it, then renamed).

    Raises:
        UsageError: ``tensorboard`` is not installed (exit 2 with the pip command).
    """
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise UsageError(
            "--format tensorboard needs the tensorboard package: pip install tensorboard"
        ) from None
    out = Path(out)
    table = study.metric_rows()
    names = study.metric_names()
    folders = []
    with atomic_path(out) as tmp:
        for trial in study.trials:
            folder = tmp / f"trial-{trial.trial_id:06d}"
            writer = SummaryWriter(log_dir=str(folder))
            rows = (table["trial"] == trial.trial_id).nonzero()[0]
            for name in names:
                if name == study.metric:  # stage-tree trials inherit their prefix's curve
                    points = zip(
                        trial.curve_steps, trial.curve_values, trial.curve_times, strict=True
                    )
                else:
                    points = zip(
                        table["step"][rows], table[name][rows], table["time"][rows], strict=True
                    )
                for step, value, t in points:
                    if not math.isnan(value):
                        writer.add_scalar(name, float(value), int(step), walltime=float(t))
            value, _ = trial_value(study.record, trial)
            metrics = {f"hparam/{study.metric}": value if math.isfinite(value) else math.nan}
            hparams = {k: _hparam(v) for k, v in trial.params.items()}
            hparams["hpctune.status"] = trial.status.value
            writer.add_hparams(hparams, metrics, run_name=".")
            writer.close()
            folders.append(out / folder.name)
    return folders


__all__ = ["write_tensorboard"]
