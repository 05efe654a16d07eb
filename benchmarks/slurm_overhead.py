"""hpctune on Slurm against a plain submitit loop: the same 16-trial digits study, same resources.

(a) ``hpctune launch`` (controller batch job, 2 workers with 1 GPU each, segments back to back);
(b) a plain loop: one Slurm job per trial through submitit ``map_array`` (at most 2 at once, 1 GPU
each), each running the same training function with a minimal context that keeps the reports and
writes a torch checkpoint per epoch, as hand-written scripts do.

Prints both wall-clock times (submission to the last trial done), their ratio, the allocated
time sacct reports for each, and hpctune's share of allocated worker time not spent training.
Needs the local cluster: ``tests/slurm/cluster.sh up``.

    python benchmarks/slurm_overhead.py [--trials 16] [--epochs 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import submitit

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hpctune.journal import open_study  # noqa: E402
from hpctune.journal.usage import study_usage  # noqa: E402
from hpctune.policies.generators import make_generator  # noqa: E402
from hpctune.slurm.accounting import sacct_allocated_s  # noqa: E402
from hpctune.spec import load_spec  # noqa: E402
from hpctune.study.schedules import evaluate  # noqa: E402
from hpctune.study.seeding import component_seed, trial_seed  # noqa: E402

SLOTS = 2


class PlainContext:
    """What a hand-written Slurm script gives the training function: params and a loop."""

    def __init__(self, params: dict[str, Any], seed: int, max_steps: int, folder: Path) -> None:
        self._params = params
        self.seed = seed
        self.max_steps = max_steps
        self.start_step = 0
        self.step = 0
        self.trial_id = seed
        self.folder = folder
        self.reports: list[dict[str, float]] = []

    @property
    def params(self) -> dict[str, Any]:
        return {k: evaluate(v, self.step) for k, v in self._params.items()}

    def value(self, name: str, step: float) -> Any:
        return evaluate(self._params[name], step)

    def load_checkpoint(self) -> None:
        return None

    def report(self, step: int, **metrics: float) -> Any:
        self.step = step
        self.reports.append({"step": step, **metrics})
        return argparse.Namespace(should_stop=False)

    def save_checkpoint(self, obj: Any) -> None:
        import torch

        torch.save(obj, self.folder / f"checkpoint-{self.seed}.pt")


def run_plain_trial(
    train_py: str, params: dict[str, Any], seed: int, max_steps: int, folder: str
) -> list[dict[str, float]]:
    """One Slurm job: import the training script, train one configuration."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("digits_train", train_py)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ctx = PlainContext(params, seed, max_steps, Path(folder))
    module.train(ctx)
    return ctx.reports


def _write_study(folder: Path, trials: int, epochs: int) -> Path:
    text = (REPO / "jobs" / "digits" / "study.toml").read_text()
    text = text.replace("num_trials = 16", f"num_trials = {trials}")
    text = text.replace("max_steps = 20 ", f"max_steps = {epochs} ")
    text = text.replace("total_steps = 20", f"total_steps = {epochs}")
    text = text.replace(
        'entry_point = "train.py:train"',
        f'entry_point = "{REPO / "jobs" / "digits" / "train.py"}:train"',
    )
    text += (
        'gpus_per_worker = 1\n\n[slurm]\npartition = "debug"\ntime = 30\nmem = "1G"\n'
        '\n[slurm.controller]\npartition = "high"\n'
    )
    path = folder / "study.toml"
    path.write_text(text.replace("slots = 2 ", f"slots = {SLOTS} "))
    return path


def run_hpctune(folder: Path, trials: int, epochs: int) -> dict[str, Any]:
    """Launch the study on Slurm and wait until it has finished."""
    spec_path = _write_study(folder, trials, epochs)
    study_dir = folder / "hpctune-study"
    start = time.time()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "hpctune.cli",
            "launch",
            str(spec_path),
            "--study-dir",
            str(study_dir),
        ],
        check=True,
        capture_output=True,
    )
    while True:
        study = open_study(study_dir)
        if study.record.state.value in ("finished", "failed", "stopped"):
            break
        time.sleep(0.5)
    assert study.record.ended_time is not None
    wall = study.record.ended_time - start
    time.sleep(8)  # let the workers exit, then read what sacct recorded
    study = open_study(study_dir)
    usage = study_usage(study.record)
    return {
        "wall_s": wall,
        "completed": study.counts()["completed"],
        "allocated_s": usage.allocated_s,
        "training_s": usage.training_s,
        "not_training_share": usage.not_training_share,
        "sacct_allocated_s": sacct_allocated_s(study.record),
        "best": study.best_value(study.best_trial().trial_id) if study.best_trial() else None,
    }


def run_plain(folder: Path, trials: int, epochs: int) -> dict[str, Any]:
    """One job per trial with submitit, at most SLOTS at once; wait for every result."""
    spec = load_spec(_write_study(folder, trials, epochs))
    generator = make_generator(
        spec.generator.name,
        spec.generator.options,
        spec.space,
        component_seed(spec.seed, "generator"),
    )
    configs = [generator.suggest(i) for i in range(trials)]
    seeds = [trial_seed(spec.seed, i) for i in range(trials)]
    executor = submitit.SlurmExecutor(folder=folder / "plain" / "%j")
    executor.update_parameters(
        partition="debug",
        time=30,
        cpus_per_task=1,
        gpus_per_node=1,
        mem="1024M",
        array_parallelism=SLOTS,
        setup=["export OMP_NUM_THREADS=1"],
    )
    start = time.time()
    train_py = str(REPO / "jobs" / "digits" / "train.py")
    n = len(configs)
    jobs = executor.map_array(
        run_plain_trial, [train_py] * n, configs, seeds, [epochs] * n, [str(folder)] * n
    )
    results = [job.result() for job in jobs]
    wall = time.time() - start
    job_ids = ",".join(job.job_id for job in jobs)
    out = subprocess.run(
        ["sacct", "-n", "-P", "-X", "-D", "-j", job_ids, "-o", "ElapsedRaw"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    best = max(max(r["val_accuracy"] for r in reports) for reports in results)
    return {
        "wall_s": wall,
        "completed": sum(len(r) == epochs for r in results),
        "sacct_allocated_s": float(sum(int(x) for x in out.split() if x.isdigit())),
        "best": best,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="print only one JSON object")
    args = parser.parse_args()
    if "SLURM_CONF" not in os.environ and not Path("/etc/slurm/slurm.conf").exists():
        sys.exit("no Slurm cluster: run tests/slurm/cluster.sh up (and its `env` exports)")
    with tempfile.TemporaryDirectory(prefix="hpctune-overhead-") as tmp:
        folder = Path(tmp)
        (folder / "a").mkdir()
        (folder / "b").mkdir()
        plain = run_plain(folder / "b", args.trials, args.epochs)
        ours = run_hpctune(folder / "a", args.trials, args.epochs)
    result = {
        "trials": args.trials,
        "epochs": args.epochs,
        "slots": SLOTS,
        "hpctune": ours,
        "plain_submitit": plain,
        "wall_ratio_hpctune_over_plain": ours["wall_s"] / plain["wall_s"],
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"{args.trials} trials x {args.epochs} epochs, {SLOTS} at once, 1 fake GPU each")
    print(f"{'':28}{'hpctune':>12}{'plain loop':>12}")
    print(f"{'wall-clock s':28}{ours['wall_s']:12.1f}{plain['wall_s']:12.1f}")
    print(f"{'trials completed':28}{ours['completed']:12d}{plain['completed']:12d}")
    print(
        f"{'sacct allocated s (workers)':28}{ours['sacct_allocated_s'] or 0:12.1f}"
        f"{plain['sacct_allocated_s']:12.1f}"
    )
    print(f"{'best val_accuracy':28}{ours['best']:12.4f}{plain['best']:12.4f}")
    print(f"hpctune / plain wall-clock: {result['wall_ratio_hpctune_over_plain']:.2f}")
    print(
        f"hpctune allocated worker time not training: {100 * ours['not_training_share']:.1f}% "
        f"(allocated {ours['allocated_s']:.1f} s, training {ours['training_s']:.1f} s)"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
