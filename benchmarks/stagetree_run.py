"""Stage-based against trial-based execution of a real study (Hippo §6's grid-search comparison).

Runs ``jobs/digits-stages`` (a grid of 6 learning-rate sequences x 4 batch-size milestone
schedules, 24 trials x 20 epochs of real PyTorch training) on the local executor with the same
number of workers twice: trial-based (``[stages] enabled = false``: every trial trains all its
epochs) and stage-based (the stage tree: shared prefixes trained once, critical-path
scheduler). Reported per run, from the journals: steps trained, worker-seconds training (the
segments' time, the GPU-hours of a GPU cluster), worker-seconds allocated, end-to-end time and
the best value; then the saving (trial-based / stage-based training time) against the merge
rate p of ``hpctune plan`` (Hippo: savings match p for grid search).

    python benchmarks/stagetree_run.py [--repeats 3] [--slots 2] [--hidden 1024]
        [--policy default|sha|asha|median] [--two-studies] [--pbt] [--json]

With ``--policy sha`` both runs use synchronous successive halving (eta 3, rungs 2, 6 and 20
epochs): trial-based SHA trains each trial to its rungs; stage-based SHA asks the stage tree for
the same rungs, so trials answered by a shared checkpoint train nothing (Hippo reports savings
above the merge rate for SHA). ``--policy asha`` (grace period 1, reduction factor 4: rungs 1,
4 and 16 epochs): trial-based ASHA decides at the rungs of running trials; stage-based ASHA
trains each trial rung by rung over the stage tree. ``--policy median`` (the median stopping
rule's defaults: judged at every epoch from the first): trial-based, workers wait for a decision
at every epoch; stage-based, each trial is trained epoch by epoch over the stage tree and judged
at each. The merge rate printed is the grid's (every trial to the end).

With ``--two-studies`` the example grid runs with a stage store (``[stages] store``), then a
follow-up study of the same model and code (4 learning-rate sequences x the same batch sizes)
runs with that store and, for comparison, without it: the 2-wise merge rate and the follow-up's
saving from reusing the first study's stages.

With ``--pbt`` PBT (population 8, 4 epochs per generation, 20 epochs) runs over five learning
rates and two batch sizes, trial-based and stage-based: a child forks from its parent's
checkpoint either way; over the stage tree, a trial identical to another (the same parent,
fork step and mutated values, or the same values in generation 0) trains nothing.

Every worker's first segment pays one-off costs (PyTorch's lazy imports at the first optimizer,
about 1 s here), and every segment a few milliseconds to build the model and load its
checkpoint; with the example's 25 ms epochs these are a sizeable share of the training time,
so ``--hidden 1024`` (about 0.15 s per epoch) shows the saving when training dominates.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hpctune.api import open_study
from hpctune.journal.usage import study_usage
from hpctune.spec import load_spec
from hpctune.stagetree.preview import plan_configs

REPO = Path(__file__).resolve().parent.parent
STUDY = REPO / "jobs" / "digits-stages" / "study.toml"


def write_variant(folder: Path, stages: bool, slots: int, hidden: int | None, policy: str) -> Path:
    """The study.toml with stages on or off, ``slots`` workers, ``hidden`` units (default: the
    example's) and ``policy``, next to its train.py."""
    text = STUDY.read_text()
    text = re.sub(r'^name = "default"', f'name = "{policy}"', text, count=1, flags=re.M)
    if hidden is not None:
        text = re.sub(r"^hidden = \d+", f"hidden = {hidden}", text, count=1, flags=re.M)
    text = re.sub(r"^enabled = \w+", f"enabled = {str(stages).lower()}", text, count=1, flags=re.M)
    text = re.sub(r"^slots = \d+", f"slots = {slots}", text, count=1, flags=re.M)
    path = folder / ("stage-based.toml" if stages else "trial-based.toml")
    path.write_text(text)
    shutil.copy(STUDY.parent / "train.py", folder / "train.py")
    return path


def run(spec_path: Path, study_dir: Path) -> dict[str, Any]:
    """Launch one study locally; return its figures from the journal."""
    t0 = time.time()
    command = [sys.executable, "-m", "hpctune.cli", "launch", str(spec_path), "--local"]
    subprocess.run(
        [*command, "--study-dir", str(study_dir)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    wall = time.time() - t0
    study = open_study(study_dir)
    record = study.record
    usage = study_usage(record)
    best = study.best_trial()
    steps = sum((s.end_step or s.start_step) - s.start_step for s in record.segments.values())
    return {
        "trials": len(record.trials),
        "completed": record.counts()["completed"],
        "segments": len(record.segments),
        "steps_trained": steps,
        "training_s": usage.training_s,
        "allocated_s": usage.allocated_s,
        "study_s": (record.ended_time or 0.0) - (record.started_time or 0.0),
        "command_s": wall,
        "best": None if best is None else study.best_value(best.trial_id),
        "checkpoints_kept": sum(not c.deleted for c in record.checkpoints.values()),
        "checkpoints_written": len(record.checkpoints),
    }


def _warmup(then: dict[str, Any]) -> dict[str, Any]:
    return {"schedule": "warmup", "warmup_steps": 3, "then": then}


FOLLOW_UP_LRS: list[dict[str, Any]] = [
    _warmup({"schedule": "cosine", "base": 0.1, "total_steps": 17}),
    _warmup({"schedule": "exponential", "base": 0.1, "gamma": 0.9}),
    _warmup({"schedule": "step", "base": 0.1, "step_size": 6, "gamma": 0.5}),
    {"schedule": "multistep", "base": 0.1, "milestones": [12, 16], "gamma": 0.1},
]


def _toml(value: Any) -> str:
    """A value as TOML (numbers, strings, lists, inline tables)."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)


def follow_up(text: str) -> str:
    """A second study of the same model, data and code: four learning-rate sequences (one as
    in the first study, two new decays after its warm-up, one later step decay) x the same
    batch-size schedules."""
    start = text.index("\nlr = [") + 1
    end = text.index("\n]", start) + 2
    lrs = "lr = [\n" + "".join(f"  {_toml(lr)},\n" for lr in FOLLOW_UP_LRS) + "]"
    return text[:start] + lrs + text[end:]


def two_studies(args: argparse.Namespace) -> dict[str, Any]:
    """The first study (the example grid) fills a stage store; the follow-up study runs with
    it (reusing the first one's stages), without it, and trial-based; figures of each run."""
    from hpctune.stagetree.plan import SearchPlan

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="hpctune-two-studies-") as tmp:
        folder = Path(tmp)
        base = write_variant(folder, True, args.slots, args.hidden, "default").read_text()
        store = f'store = "{folder / "store"}"\nfingerprint = "digits-mlp-benchmark"\n'
        texts = {
            "first": base.replace("[stages]\n", "[stages]\n" + store),
            "follow-up with the store": follow_up(base).replace(
                "[stages]\n", "[stages]\n" + store
            ),
            "follow-up alone": follow_up(base),
            "follow-up trial-based": follow_up(base).replace("enabled = true", "enabled = false"),
        }
        specs = {}
        for name, text in texts.items():
            path = folder / f"{name.replace(' ', '-')}.toml"
            path.write_text(text)
            specs[name] = path
        plans = {name: plan_configs(_grid(load_spec(p)), 20) for name, p in specs.items()}
        both = SearchPlan()
        plan_configs(_grid(load_spec(specs["first"])), 20, both)
        plan_configs(_grid(load_spec(specs["follow-up alone"])), 20, both, first_id=100)
        out["merge_rate"] = {
            "first": plans["first"].merge_rate(),
            "follow-up": plans["follow-up alone"].merge_rate(),
            "two-wise": both.merge_rate(),
            "follow-up unique steps": plans["follow-up alone"].unique_steps(),
            "both unique steps": both.unique_steps(),
            "first unique steps": plans["first"].unique_steps(),
        }
        for name, path in specs.items():
            out[name] = run(path, folder / name.replace(" ", "-"))
    return out


def format_two_studies(result: dict[str, Any]) -> str:
    """The two-study figures as text."""
    rates = result["merge_rate"]
    lines = [
        f"merge rates: first {rates['first']:.2f}, follow-up {rates['follow-up']:.2f}, "
        f"2-wise {rates['two-wise']:.2f}; unique steps: first {rates['first unique steps']}, "
        f"follow-up {rates['follow-up unique steps']}, both {rates['both unique steps']}"
    ]
    for name in ("first", "follow-up trial-based", "follow-up alone", "follow-up with the store"):
        r = result[name]
        lines.append(
            f"{name:<26} trials {r['trials']:>3} steps {r['steps_trained']:>4} "
            f"train {r['training_s']:>7.2f} s study {r['study_s']:>6.2f} s best {r['best']:.4f}"
        )
    reused = result["follow-up with the store"]
    for base in ("follow-up alone", "follow-up trial-based"):
        seconds = result[base]["training_s"] / reused["training_s"]
        steps = result[base]["steps_trained"] / max(reused["steps_trained"], 1)
        lines.append(
            f"follow-up with the store against {base}: {seconds:.2f}x fewer worker-seconds "
            f"training, {steps:.2f}x fewer steps"
        )
    return "\n".join(lines)


PBT_SPACE = """[search_space]
hidden = {hidden}
layers = 2
dropout = 0.1
momentum = 0.9
weight_decay = 1e-4
activation = "relu"
lr = [0.01, 0.02, 0.05, 0.1, 0.2]
batch_size = [32, 64]

[generator]
name = "random"

[policy]
name = "pbt"
population_size = 8
steps_per_generation = 4
"""


def pbt_variant(folder: Path, stages: bool, slots: int, hidden: int | None) -> Path:
    """PBT (population 8, 4 epochs per generation, 20 epochs) over discrete learning rates and
    batch sizes (mutation moves a value to a neighbour), stages on or off."""
    text = write_variant(folder, stages, slots, hidden, "default").read_text()
    text = text.replace("\nseed = 0\n", "\nseed = 0\nnum_trials = 8\n", 1)
    start, end = text.index("\n[search_space]") + 1, text.index("\n[stages]") + 1
    text = text[:start] + PBT_SPACE.format(hidden=hidden or 128) + "\n" + text[end:]
    path = folder / f"pbt-{'stage' if stages else 'trial'}-based.toml"
    path.write_text(text)
    return path


def pbt_runs(args: argparse.Namespace) -> dict[str, Any]:
    """PBT trial-based and stage-based (children identical to another trial are answered by
    its checkpoint); figures of each run, and how many trials trained nothing."""
    out: dict[str, Any] = {"trial-based": [], "stage-based": []}
    with tempfile.TemporaryDirectory(prefix="hpctune-pbt-stages-") as tmp:
        folder = Path(tmp)
        for i in range(args.repeats):
            for name in ("trial-based", "stage-based"):
                path = pbt_variant(folder, name == "stage-based", args.slots, args.hidden)
                study_dir = folder / f"{name}-{i}"
                result = run(path, study_dir)
                record = open_study(study_dir).record
                result["answered"] = sum(not t.segments for t in record.trials.values())
                out[name].append(result)
    return out


def format_pbt(result: dict[str, Any]) -> str:
    """The PBT figures as text."""
    lines = [
        f"{'run':<14}{'trials':>7}{'answered':>9}{'steps':>7}{'train s':>9}{'study s':>9}"
        f"{'best':>8}"
    ]
    for name in ("trial-based", "stage-based"):
        for r in result[name]:
            lines.append(
                f"{name:<14}{r['trials']:>7}{r['answered']:>9}{r['steps_trained']:>7}"
                f"{r['training_s']:>9.2f}{r['study_s']:>9.2f}{r['best']:>8.4f}"
            )
    median = {
        name: {
            k: statistics.median(r[k] for r in result[name])
            for k in ("training_s", "steps_trained")
        }
        for name in ("trial-based", "stage-based")
    }
    lines.append(
        f"median worker-seconds training: trial-based {median['trial-based']['training_s']:.2f}, "
        f"stage-based {median['stage-based']['training_s']:.2f} "
        f"({median['trial-based']['training_s'] / median['stage-based']['training_s']:.2f}x); "
        f"steps {median['trial-based']['steps_trained']:g} vs "
        f"{median['stage-based']['steps_trained']:g}"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument(
        "--policy", choices=["default", "sha", "asha", "median"], default="default"
    )
    parser.add_argument(
        "--hidden", type=int, default=None, help="hidden units (longer epochs; default 128)"
    )
    parser.add_argument(
        "--two-studies",
        action="store_true",
        help="a first study fills a stage store, a follow-up study reuses it",
    )
    parser.add_argument(
        "--pbt",
        action="store_true",
        help="PBT over discrete values, trial-based against stage-based",
    )
    parser.add_argument("--json", action="store_true", help="print only one JSON object")
    args = parser.parse_args()
    if args.pbt:
        result = pbt_runs(args)
        print(json.dumps(result, indent=1) if args.json else format_pbt(result))
        return
    if args.two_studies:
        result = two_studies(args)
        print(json.dumps(result, indent=1) if args.json else format_two_studies(result))
        return
    spec = load_spec(STUDY)
    configs = [dict(c) for c in _grid(spec)]
    plan = plan_configs(configs, spec.max_steps)
    results: dict[str, list[dict[str, Any]]] = {"trial-based": [], "stage-based": []}
    with tempfile.TemporaryDirectory(prefix="hpctune-stages-") as tmp:
        folder = Path(tmp)
        variants = {
            "trial-based": write_variant(folder, False, args.slots, args.hidden, args.policy),
            "stage-based": write_variant(folder, True, args.slots, args.hidden, args.policy),
        }
        for i in range(args.repeats):
            for name, path in variants.items():
                results[name].append(run(path, folder / f"{name}-{i}"))
    summary = {
        name: {
            k: statistics.median(r[k] for r in runs)
            for k in ("training_s", "study_s", "steps_trained")
        }
        for name, runs in results.items()
    }
    saving = summary["trial-based"]["training_s"] / summary["stage-based"]["training_s"]
    speedup = summary["trial-based"]["study_s"] / summary["stage-based"]["study_s"]
    out = {
        "trials": len(plan.trials),
        "total_steps": plan.total_steps(),
        "unique_steps": plan.unique_steps(),
        "merge_rate": plan.merge_rate(),
        "slots": args.slots,
        "hidden": args.hidden,
        "policy": args.policy,
        "runs": results,
        "median": summary,
        "saving": saving,
        "saving_over_merge_rate": saving / plan.merge_rate(),
        "end_to_end_speedup": speedup,
    }
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(
        f"jobs/digits-stages: {out['trials']} trials, {out['total_steps']} total vs "
        f"{out['unique_steps']} unique steps, merge rate p = {out['merge_rate']:.2f}; "
        f"{args.slots} workers, {args.repeats} repeats, hidden {args.hidden or 'as the example'}, "
        f"policy {args.policy}"
    )
    print(f"{'run':<14}{'steps':>7}{'train s':>9}{'alloc s':>9}{'study s':>9}{'best':>8}")
    for name, runs in results.items():
        for r in runs:
            print(
                f"{name:<14}{r['steps_trained']:>7}{r['training_s']:>9.2f}"
                f"{r['allocated_s']:>9.2f}{r['study_s']:>9.2f}{r['best']:>8.4f}"
            )
    print(
        f"median worker-seconds training: trial-based {summary['trial-based']['training_s']:.2f}"
        f", stage-based {summary['stage-based']['training_s']:.2f}: saving {saving:.2f}x = "
        f"{out['saving_over_merge_rate']:.2f} x the merge rate; end to end {speedup:.2f}x; "
        f"median steps trained {summary['trial-based']['steps_trained']:g} vs "
        f"{summary['stage-based']['steps_trained']:g}"
    )


def _grid(spec: Any) -> list[dict[str, Any]]:
    from hpctune.policies.generators import make_generator
    from hpctune.study.seeding import component_seed

    gen = make_generator(
        spec.generator.name,
        spec.generator.options,
        spec.space,
        component_seed(spec.seed, "generator"),
    )
    return [gen.suggest(i) for i in range(spec.num_trials)]


if __name__ == "__main__":
    main()
