"""PBT against random search at equal training steps, on real PyTorch runs (jobs/digits-pbt).

For each seed and each setting (population 8 on 2 workers: budget mode; population 4 on 4
workers: asynchronous), two studies run on the local executor with the same search space
(learning rate and momentum) and the same first configurations (the study seed drives the
generator): PBT (`pbt`, 3 epochs per generation, 24 epochs in all) and random search (`default`
policy, the population's configurations each trained for 24 epochs with constant
hyperparameters). Both use population x 24 training epochs (PBT a few more when an older parent
wins a tournament; the counts are printed). Figures: the best validation loss and accuracy any
trial reached, and the validation loss of the final model PBT delivers (its fittest trial's last
value) against random search's best final one. ``--plot`` draws the learning-rate schedules PBT
found (the fittest lineage of each run) against random search's best constant rate.

    python benchmarks/pbt.py [--seeds 3] [--out /tmp/hpctune-pbt-bench] [--plot pbt-lr.png]
        [--json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
TRAIN = REPO / "jobs" / "digits-pbt" / "train.py"
SETTINGS = (("pbt 8 on 2", 8, 2), ("pbt 4 on 4", 4, 4))
#: --quick's settings: the same two modes (budget: more trials than workers; asynchronous: one
#: worker per trial) at half the population, so a smoke run starts a quarter of the workers
QUICK_SETTINGS = (("pbt 4 on 2", 4, 2), ("pbt 2 on 2", 2, 2))

STUDY = """[study]
name = "{name}"
directory = "study"
entry_point = "train.py:train"
metric = "val_loss"
mode = "min"
metric_bounds = [0.0, 2.5]
max_steps = {max_steps}
num_trials = {population}
seed = {seed}

[search_space]
lr = {{ type = "float", low = 1e-3, high = 0.5, log = true }}
momentum = {{ type = "float", low = 0.5, high = 0.95 }}
hidden = 64
dropout = 0.1
batch_size = 32

[policy]
{policy}

[resources]
slots = {slots}
"""


def run_study(
    folder: Path, policy: str, *, population: int, slots: int, seed: int, max_steps: int
) -> dict[str, Any]:
    """Run one study in ``folder`` (created afresh); return its figures."""
    from hpctune.api import open_study

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    shutil.copy(TRAIN, folder / "train.py")
    text = STUDY.format(
        name=folder.name,
        max_steps=max_steps,
        population=population,
        seed=seed,
        policy=policy,
        slots=slots,
    )
    (folder / "study.toml").write_text(text)
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "hpctune.cli", "launch", str(folder / "study.toml"), "--local"],
        capture_output=True,
        text=True,
        cwd=folder,
        timeout=1800,
    )
    seconds = time.monotonic() - start
    if result.returncode != 0:
        raise RuntimeError(f"study in {folder} failed:\n{result.stdout}\n{result.stderr}")
    study = open_study(folder / "study")
    frame = study.metrics_frame()
    trials = study.record.trials
    finals = {tid: t.curve_values[-1] for tid, t in trials.items() if t.curve_values}
    fittest = min(finals, key=lambda tid: (finals[tid], tid))
    schedule = []
    tid: int | None = fittest
    while tid is not None:
        t = trials[tid]
        schedule.append([t.parent_step or 0, int(t.end_step or max_steps), t.params["lr"]])
        tid = t.parent_trial
    by_time = frame.sort_values("time")
    return {
        "val_loss_by_time": [float(v) for v in by_time["val_loss"]],
        "val_accuracy_by_time": [float(v) for v in by_time["val_accuracy"]],
        "best_val_loss": float(np.nanmin(frame["val_loss"])),
        "best_val_accuracy": float(np.nanmax(frame["val_accuracy"])),
        "final_val_loss": float(finals[fittest]),
        "training_steps": len(frame),
        "trials": len(trials),
        "seconds": round(seconds, 1),
        "lr_schedule": schedule[::-1],
    }


def equal_steps(run: dict[str, Any]) -> None:
    """Add PBT's best values within random search's number of training epochs (the first
    reports in time order), and drop the per-report lists."""
    pbt, rnd = run["pbt"], run["random"]
    budget = rnd["training_steps"]
    pbt["best_val_loss_equal_steps"] = float(np.nanmin(pbt["val_loss_by_time"][:budget]))
    pbt["best_val_accuracy_equal_steps"] = float(np.nanmax(pbt["val_accuracy_by_time"][:budget]))
    for side in (pbt, rnd):
        del side["val_loss_by_time"], side["val_accuracy_by_time"]


def plot(runs: list[dict[str, Any]], out: Path) -> None:
    """The lr schedules PBT found (fittest lineage per run) and random search's best lr."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(SETTINGS), figsize=(11, 4), sharey=True)
    for ax, (label, _, _) in zip(np.atleast_1d(axes), SETTINGS, strict=True):
        for run in (r for r in runs if r["setting"] == label):
            pbt, rnd = run["pbt"], run["random"]
            steps = [s for a, b, _ in pbt["lr_schedule"] for s in (a, b)]
            lrs = [lr for _, _, lr in pbt["lr_schedule"] for _ in (0, 1)]
            line = ax.plot(steps, lrs, lw=2, label=f"PBT seed {run['seed']}")[0]
            ax.hlines(
                rnd["lr_schedule"][0][2],
                0,
                rnd["lr_schedule"][0][1],
                color=line.get_color(),
                ls="--",
                lw=1,
                label=f"random best, seed {run['seed']}",
            )
        ax.set_yscale("log")
        ax.set_xlabel("epoch")
        ax.set_title(label)
    np.atleast_1d(axes)[0].set_ylabel("learning rate")
    np.atleast_1d(axes)[-1].legend(fontsize=7)
    fig.suptitle("learning-rate schedule of the final model (digits MLP, val_loss)")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("/tmp/hpctune-pbt-bench"))
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument("--json", action="store_true", help="print only one JSON object")
    parser.add_argument(
        "--quick", action="store_true", help="1 seed, 6 epochs, half the populations (smoke run)"
    )
    args = parser.parse_args()
    max_steps = 6 if args.quick else 24
    seeds = 1 if args.quick else args.seeds
    settings = QUICK_SETTINGS if args.quick else SETTINGS
    runs = []
    for seed in range(seeds):
        for label, population, slots in settings:
            tag = f"p{population}s{slots}-seed{seed}"
            pbt_policy = f'name = "pbt"\npopulation_size = {population}\nsteps_per_generation = 3'
            run = {
                "setting": label,
                "seed": seed,
                "pbt": run_study(
                    args.out / f"pbt-{tag}",
                    pbt_policy,
                    population=population,
                    slots=slots,
                    seed=seed,
                    max_steps=max_steps,
                ),
                "random": run_study(
                    args.out / f"random-{tag}",
                    'name = "default"',
                    population=population,
                    slots=slots,
                    seed=seed,
                    max_steps=max_steps,
                ),
            }
            equal_steps(run)
            runs.append(run)
            if not args.json:
                p, r = run["pbt"], run["random"]
                print(
                    f"{label:11s} seed {seed}: best val_loss PBT {p['best_val_loss']:.4f} "
                    f"(within {r['training_steps']} epochs {p['best_val_loss_equal_steps']:.4f}) "
                    f"random {r['best_val_loss']:.4f} | final model PBT "
                    f"{p['final_val_loss']:.4f} random {r['final_val_loss']:.4f} | best "
                    f"val_accuracy PBT {p['best_val_accuracy']:.4f} random "
                    f"{r['best_val_accuracy']:.4f} | steps {p['training_steps']} vs "
                    f"{r['training_steps']} | {p['seconds']:.0f} s vs {r['seconds']:.0f} s",
                    flush=True,
                )
    summary = {}
    for label, _, _ in settings:
        mine = [r for r in runs if r["setting"] == label]
        summary[label] = {
            f"{method}_{key}_mean": float(np.mean([r[method][key] for r in mine]))
            for method in ("pbt", "random")
            for key in ("best_val_loss", "final_val_loss", "best_val_accuracy", "training_steps")
        }
        for key in ("best_val_loss_equal_steps", "best_val_accuracy_equal_steps"):
            summary[label][f"pbt_{key}_mean"] = float(np.mean([r["pbt"][key] for r in mine]))
        summary[label]["pbt_wins_best_val_loss"] = sum(
            r["pbt"]["best_val_loss_equal_steps"] < r["random"]["best_val_loss"] for r in mine
        )
        summary[label]["seeds"] = len(mine)
    if args.plot is not None:
        plot(runs, args.plot)
    if args.json:
        print(json.dumps({"quick": args.quick, "summary": summary, "runs": runs}))
        return
    print()
    for label, s in summary.items():
        print(
            f"{label}: mean best val_loss at equal epochs PBT "
            f"{s['pbt_best_val_loss_equal_steps_mean']:.4f} vs random "
            f"{s['random_best_val_loss_mean']:.4f} (PBT better in "
            f"{s['pbt_wins_best_val_loss']}/{s['seeds']} seeds; PBT over all its "
            f"{s['pbt_training_steps_mean']:.0f} epochs {s['pbt_best_val_loss_mean']:.4f}, random "
            f"{s['random_training_steps_mean']:.0f}); final model "
            f"{s['pbt_final_val_loss_mean']:.4f} vs {s['random_final_val_loss_mean']:.4f}; "
            f"best val_accuracy at equal epochs {s['pbt_best_val_accuracy_equal_steps_mean']:.4f}"
            f" vs {s['random_best_val_accuracy_mean']:.4f}"
        )
    if args.plot is not None:
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
