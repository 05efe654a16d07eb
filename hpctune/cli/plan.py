"""Commands that plan before anything runs: ``plan`` (the stage tree of study.toml files),
``profile`` (a workload's profile for the elastic planner) and ``plan-elastic`` (the cheapest
allocation that meets a deadline)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import click

from hpctune.cli.common import (
    EXIT_FAILURE,
    EXIT_OK,
    backend_option,
    echo_lines,
    json_option,
    local_option,
    plot_option,
)
from hpctune.errors import UsageError

if TYPE_CHECKING:
    from hpctune.elastic import CostModel, Profile
    from hpctune.spec import StudySpec


@click.command("plan")
@click.argument(
    "study_tomls", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path)
)
@json_option()
@click.option(
    "--max-lines",
    type=int,
    default=60,
    show_default=True,
    help="Stage lines to print (0: all).",
)
@plot_option("Also draw the stage tree to this file (PNG).")
def plan_command(
    study_tomls: tuple[Path, ...], as_json: bool, max_lines: int, plot_path: Path | None
) -> int:
    """Show the trials of STUDY_TOMLS as a stage tree before anything runs.

    Draws each study's trials with its generator, cuts each configuration into stages where a
    hyperparameter's function changes and merges shared prefixes (Hippo's search plan): prints
    the number of trials, total (trial-based) and unique (stage-based) training steps, the merge
    rate p = total / unique and the stage tree. With several studies (of the same model, data
    and code: equal training files, metrics and `stages.fingerprint`, else refused) their
    trials share one plan and the k-wise merge rate is shown. Creates nothing.
    """
    from hpctune.spec import load_spec
    from hpctune.spec.proposals import first_configs
    from hpctune.stagetree.options import share_digest
    from hpctune.stagetree.preview import PlannedStudy, preview_plan

    specs = [load_spec(path) for path in study_tomls]
    keys = [share_digest(s.stages.fingerprint, s.entry.code(), s.metric) for s in specs]
    for other, key in zip(specs[1:], keys[1:], strict=True):
        if key != keys[0]:
            raise UsageError(
                f"{other.source} cannot share stages with {specs[0].source}: their training "
                "files, metrics or `stages.fingerprint` differ (studies share stages only when "
                "all three are equal); plan them separately"
            )
    studies = [
        PlannedStudy(
            s.name, s.generator.name, s.max_steps, s.step_unit, first_configs(s, s.num_trials)
        )
        for s in specs
    ]
    try:
        preview = preview_plan(studies, specs[0].resources.slots)
    except ValueError as exc:  # pragma: no cover - the spec checks schedules already
        raise UsageError(str(exc)) from None
    if plot_path is not None:
        from hpctune.stagetree.plots import plot_stage_tree

        plot_stage_tree(preview.tree, plot_path, title=preview.title, unit=specs[0].step_unit)
    if as_json:
        click.echo(json.dumps(preview.to_dict()))
        return EXIT_OK
    echo_lines(preview.lines(max_lines))
    if plot_path is not None:
        click.echo(f"plot: {plot_path}")
    return EXIT_OK


@click.command("profile")
@click.argument("study_toml", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--sizes",
    default=None,
    metavar="1,2,4",
    help="With STUDY_TOML: the devices per trial to measure [default: 1,2,4].",
)
@click.option(
    "--steps",
    "step_texts",
    multiple=True,
    metavar="N | DEVICES=SOURCE",
    help="With STUDY_TOML: the steps to time at each size [default: 5]. Without it: seconds "
    "per step at DEVICES devices per trial, from a trace file or a finished study directory; "
    "repeatable.",
)
@local_option(
    "With STUDY_TOML: run the short studies here (the default when sbatch is not on PATH)."
)
@click.option(
    "--speedup",
    "speedup_texts",
    multiple=True,
    metavar="DEVICES=X",
    help="Throughput at DEVICES over one device, for a size not measured; repeatable.",
)
@click.option("--queue-wait", type=float, default=None, help="SCALE (s) [default: 0].")
@click.option("--startup", type=float, default=None, help="INIT (s) [default: 0].")
@click.option(
    "--latencies-from",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="A study directory whose workers' queue waits and start-ups replace --queue-wait and "
    "--startup, and whose rung decisions (sha, hyperband, asha: a finished rung's last segment "
    "end to the next rung's first segment start) replace --decision.",
)
@click.option(
    "--decision",
    type=float,
    default=None,
    help="SYNC (s): a rung's decision [default: 0]. With STUDY_TOML: measured by one more "
    "short study under the sha policy (two rung decisions, six steps); giving --decision "
    "skips it and keeps this value.",
)
@click.option(
    "--together",
    default=None,
    metavar="2,4",
    help="With STUDY_TOML: for each count N, one more short study of N workers starting and "
    "training at once (INIT, warm-up and steps with them together; 0: none) [default: the "
    "spec's slots].",
)
@click.option(
    "--segment-start",
    type=float,
    default=None,
    help="Seconds a segment takes to begin (checkpoint load) [default: 0].",
)
@click.option("--device", type=click.Choice(["gpu", "cpu"]), default=None, help="[default: gpu]")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where to write the profile (JSON, for plan-elastic --profile); with STUDY_TOML "
    "default: profile.json in its study directory.",
)
@json_option("Print the profile as JSON.")
@backend_option
def profile_command(
    study_toml: Path | None,
    sizes: str | None,
    step_texts: tuple[str, ...],
    local: bool,
    speedup_texts: tuple[str, ...],
    queue_wait: float | None,
    startup: float | None,
    latencies_from: Path | None,
    decision: float | None,
    together: str | None,
    segment_start: float | None,
    device: str | None,
    out: Path | None,
    as_json: bool,
    backend_name: str | None,
) -> int:
    """Write a workload's profile for the elastic planner (docs/elastic.md).

    \b
    hpctune profile study.toml [--sizes 1,2,4] [--steps 5] [--together N] [--local]
      runs a short study of STUDY_TOML's training function per size (one worker of that many
      devices, ctx.devices; CPUs locally; three trials one after the other), and measures
      steady seconds per step, the segment start, the gap between segments, the first
      segment's warm-up, checkpoint save and load, and the queue wait (SCALE) and start-up
      (INIT) of a worker; then one of N workers at once (start-up, warm-up and steps
      together); then one under the sha policy (4 trials, rungs at 1 and 2 steps, one
      worker of the smallest size) for the rung decision (SYNC), unless --decision is given.
    hpctune profile --steps 1=TRACE [--steps 2=STUDY_DIR ...] [--speedup 4=3.5] --out PATH
      takes seconds per step from traces or finished studies.

    Prints the mean seconds per step and the speed-up at each size.
    """
    pairs = _size_pairs(speedup_texts, "--speedup")
    speedups = {size: _speedup(size, text) for size, text in pairs}
    given = {
        "--queue-wait": queue_wait,
        "--startup": startup,
        "--latencies-from": latencies_from,
        "--segment-start": segment_start,
        "--device": device,
    }
    if study_toml is not None:
        _refuse_measured(given)
        return _profile_study(
            study_toml, sizes, step_texts, local, speedups, decision, together, out, as_json,
            backend_name,
        )  # fmt: skip
    _refuse_without_study({"--sizes": sizes, "--local": local or None, "--together": together})
    return _profile_steps(
        step_texts, speedups, queue_wait, startup, latencies_from, decision, segment_start,
        device, out, as_json,
    )  # fmt: skip


def _refuse_measured(options: Mapping[str, object]) -> None:
    """Refuse the options given (not ``None``) that ``profile STUDY_TOML`` measures."""
    given = [name for name, value in options.items() if value is not None]
    if given:
        raise UsageError(
            f"{', '.join(given)}: measured by `hpctune profile STUDY_TOML`; leave "
            f"{'them' if len(given) > 1 else 'it'} out, or give the step times with "
            "--steps DEVICES=SOURCE and no STUDY_TOML"
        )


def _refuse_without_study(options: Mapping[str, object]) -> None:
    """Refuse the first option given (not ``None``) that needs a STUDY_TOML."""
    first = next((name for name, value in options.items() if value is not None), None)
    if first is not None:
        raise UsageError(
            f"{first} needs a STUDY_TOML to run: `hpctune profile study.toml --sizes 1,2,4`"
        )


def _size_pairs(texts: tuple[str, ...], option: str) -> list[tuple[int, str]]:
    """``SIZE=VALUE`` options as ``(size, value)`` pairs (exit 2 on a malformed one)."""
    pairs = []
    for text in texts:
        size, sep, value = text.partition("=")
        if not sep or not size.strip().isdigit() or int(size) < 1 or not value.strip():
            raise UsageError(f"{option} {text!r}: expected SIZE=VALUE with SIZE >= 1 devices")
        pairs.append((int(size), value.strip()))
    return pairs


def _speedup(size: int, text: str) -> float:
    """``--speedup SIZE=X``: the speed-up X (exit 2 when it is not a number)."""
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"--speedup {size}={text}: the speed-up must be a number") from None


def _profile_steps(
    step_texts: tuple[str, ...],
    speedups: dict[int, float],
    queue_wait: float | None,
    startup: float | None,
    latencies_from: Path | None,
    decision: float | None,
    segment_start: float | None,
    device: str | None,
    out: Path | None,
    as_json: bool,
) -> int:
    """``hpctune profile --steps DEVICES=SOURCE ...``: a profile of step times measured before."""
    from hpctune.profiler.from_traces import profile_from_sources
    from hpctune.profiler.study import profile_lines

    if not step_texts:
        raise UsageError(
            "give a STUDY_TOML to measure (`hpctune profile study.toml`), or measured step "
            "times with --steps DEVICES=SOURCE (a trace file or a finished study directory)"
        )
    if out is None:
        raise UsageError("--out: where to write the profile, e.g. --out profile.json")
    sources = [(size, Path(text)) for size, text in _size_pairs(step_texts, "--steps")]
    profile = profile_from_sources(
        sources,
        speedups,
        latencies_from=latencies_from,
        queue_wait=queue_wait or 0.0,
        startup=startup or 0.0,
        decision=decision,
        segment_start=segment_start or 0.0,
        device=device or "gpu",
    )
    profile.save(out)
    if as_json:
        click.echo(json.dumps(profile.to_dict()))
    else:
        echo_lines(profile_lines(profile, out, {size for size, _ in sources}))
    return EXIT_OK


def _profile_study(
    study_toml: Path,
    sizes_text: str | None,
    step_texts: tuple[str, ...],
    local: bool,
    speedups: dict[int, float],
    decision: float | None,
    together_text: str | None,
    out: Path | None,
    as_json: bool,
    backend_name: str | None,
) -> int:
    """``hpctune profile STUDY_TOML``: measure the profile with short studies, one per size."""
    from hpctune.backends import choose_backend
    from hpctune.controller.launch import check_entry_point
    from hpctune.profiler.measure import DEFAULT_SIZES, parse_sizes
    from hpctune.profiler.study import ProfilePlan, profile_study, together_counts
    from hpctune.spec import load_spec

    steps = _steps_to_time(step_texts)
    sizes = DEFAULT_SIZES if sizes_text is None else parse_sizes(sizes_text)
    spec = load_spec(study_toml)
    check_entry_point(spec)
    backend, _ = choose_backend(backend_name, local=local)
    together = together_counts(spec, together_text)
    plan = ProfilePlan(spec, sizes, steps, together, decision, speedups)
    plan.check(backend)  # before anything runs
    if not as_json:
        click.echo(plan.headline(backend))
    measured = profile_study(
        plan, backend, out, say=(lambda line: None) if as_json else click.echo
    )
    if as_json:
        click.echo(json.dumps(measured.profile.to_dict()))
        return EXIT_OK
    echo_lines(measured.lines())
    note = measured.cpu_note(cluster=backend.cluster)
    if note is not None:
        click.echo(note)
    where = "" if out is None else f" --profile {measured.path}"
    click.echo(f"plan with: hpctune plan-elastic {study_toml} --deadline 2h{where}")
    return EXIT_OK


def _steps_to_time(step_texts: tuple[str, ...]) -> int:
    """``--steps N`` with STUDY_TOML: the steps to time at each size (default 5)."""
    from hpctune.profiler.measure import DEFAULT_STEPS

    if len(step_texts) > 1 or any("=" in text for text in step_texts):
        raise UsageError(
            f"--steps {' --steps '.join(step_texts)}: with STUDY_TOML, --steps is the number of "
            "steps to time at each size (e.g. --steps 5); DEVICES=SOURCE step times go "
            "without STUDY_TOML"
        )
    if not step_texts:
        return DEFAULT_STEPS
    text = step_texts[0].strip()
    if not text.isdigit() or int(text) < 1:
        raise UsageError(
            f"--steps {step_texts[0]!r}: the steps to time at each size must be a whole "
            "number >= 1, e.g. --steps 5"
        )
    return int(text)


@click.command("plan-elastic")
@click.argument("study_toml", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--deadline", required=True, help="From the study's start: 2h, 1h30m, 90m, 45s.")
@click.option(
    "--profile",
    "profile_path",
    type=click.Path(path_type=Path),
    default=None,
    help="The profile (hpctune profile --out); default: profile.json in the study directory.",
)
@click.option("--price", type=float, default=None, help="Money per GPU-hour (billed hour).")
@click.option(
    "--billing-weight",
    type=float,
    default=None,
    help="Billed units per device-hour (default 1, or from --partition).",
)
@click.option(
    "--partition",
    default=None,
    help="Read the billing weight from this partition's TRESBillingWeights (scontrol).",
)
@click.option(
    "--basis",
    type=click.Choice(["held", "used"]),
    default="held",
    show_default=True,
    help="Cost of devices held (start to end, idle included) or used (in segments).",
)
@click.option("--max-pool", type=int, default=None, help="Most devices held at once.")
@click.option("--node-devices", type=int, default=None, help="Devices of a node (whole nodes).")
@click.option(
    "--quantile",
    type=float,
    default=None,
    help="Judge the deadline on this quantile of the completion time (default: its mean).",
)
@click.option("--samples", type=int, default=64, show_default=True, help="Per simulation.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds the simulator.")
@json_option()
@plot_option("Also draw the devices held per stage, plan against static, to this PNG.")
def plan_elastic_command(
    study_toml: Path,
    deadline: str,
    profile_path: Path | None,
    price: float | None,
    billing_weight: float | None,
    partition: str | None,
    basis: str,
    max_pool: int | None,
    node_devices: int | None,
    quantile: float | None,
    samples: int,
    seed: int,
    as_json: bool,
    plot_path: Path | None,
) -> int:
    """Plan the cheapest elastic allocation that finishes STUDY_TOML by --deadline.

    RubberBand's planner (docs/elastic.md): the study's rungs (SHA, Hyperband, ASHA) as stages,
    simulated from the profile; prints per stage the trials, devices per trial and pool of the
    plan and of the best static plan, with their predicted completion time and cost. Exit 1
    when no plan is predicted to meet the deadline. Creates nothing.
    """
    from hpctune.elastic import PlanOptions, Profile, experiment_from_study
    from hpctune.elastic import plan_elastic as plan
    from hpctune.elastic.profile import PROFILE_FILE
    from hpctune.elastic.report import format_plan, plot_plan
    from hpctune.spec import load_spec
    from hpctune.study.formatting import parse_duration

    seconds = parse_duration(deadline)
    spec = load_spec(study_toml)
    experiment = experiment_from_study(spec)
    profile = Profile.load(profile_path or spec.directory / PROFILE_FILE)
    cost = _cost_model(spec, profile, basis, price, billing_weight, partition)
    options = PlanOptions(
        samples=samples, seed=seed, quantile=quantile, max_pool=max_pool, node_devices=node_devices
    )
    result = plan(experiment, profile, seconds, cost, options=options)
    if plot_path is not None:
        plot_plan(result, plot_path)
    if as_json:
        click.echo(json.dumps(result.to_dict()))
    else:
        click.echo(format_plan(result))
        if plot_path is not None:
            click.echo(f"plot: {plot_path}")
    return EXIT_OK if result.feasible else EXIT_FAILURE


def _cost_model(
    spec: StudySpec,
    profile: Profile,
    basis: str,
    price: float | None,
    billing_weight: float | None,
    partition: str | None,
) -> CostModel:
    """``plan-elastic``'s cost model: ``--billing-weight``, else the weight of a device of
    ``--partition`` (the backend's billing), else 1."""
    from hpctune.elastic import CostModel

    source = "--billing-weight" if billing_weight is not None else ""
    if billing_weight is None and partition is not None:
        from hpctune.backends import choose_backend

        gpu = profile.device == "gpu"
        billing_weight, source = choose_backend()[0].billing_weight(spec, partition, gpu)
    return CostModel(
        basis=basis,
        billing_weight=1.0 if billing_weight is None else billing_weight,
        price=price,
        device="CPU" if profile.device == "cpu" else "GPU",
        billing_source=source,
    )


COMMANDS = [plan_command, profile_command, plan_elastic_command]
