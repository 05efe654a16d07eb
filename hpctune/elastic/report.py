"""How a plan is shown: a deadline parsed from ``2h``, the per-stage table, and a plot.

Used by ``hpctune plan-elastic`` and ``benchmarks/elastic.py``; text in, text out (the plot
writes one PNG).
"""

from __future__ import annotations

from pathlib import Path

from hpctune.elastic.planner import Plan, PlanResult
from hpctune.study.formatting import format_duration, parse_duration


def _plan_lines(result: PlanResult, plan: Plan, title: str) -> list[str]:
    cost, p = result.cost, plan.prediction
    unit = result.spec.step_unit
    meets = "meets" if plan.feasible else "MISSES"
    lines = [
        f"{title}: {format_duration(p.time.mean)} (p10 {format_duration(p.time.p10)}, p90 "
        f"{format_duration(p.time.p90)}; {meets} the deadline), cost {cost.format(p.cost.mean)}"
        f" ± {cost.format(p.cost.sd)}",
        f"  {'stage':>5} {'bracket':>7} {unit + 's':>12} {'trials':>6} "
        f"{cost.device + 's/trial':>10} {'workers':>7} {'pool':>5}",
    ]
    for row in plan.rows(result.spec):
        span = f"{row['start_step']}-{row['end_step']}"
        lines.append(
            f"  {row['stage']:>5} {row['bracket']:>7} {span:>12} {row['trials']:>6} "
            f"{row['devices_per_trial']:>10} {row['workers']:>7} {row['pool']:>5}"
        )
    critical = ", ".join(f"{k} {format_duration(v)}" for k, v in p.critical.items() if v > 0)
    lines.append(f"  critical path: {critical}")
    lines.append(
        f"  {cost.device}-hours held {p.device_hours_held:.3g}, used {p.device_hours_used:.3g}"
    )
    return lines


def format_plan(result: PlanResult) -> str:
    """The plan and the best static plan, per stage, with their predicted time and cost."""
    spec = result.spec
    head = [
        f"elastic plan for {spec.name or 'the study'}: {spec.num_stages()} stages, "
        f"{spec.trial_steps()} trial-{spec.step_unit}s, deadline "
        f"{format_duration(result.deadline)}, cost in {result.cost.unit} "
        f"({result.cost.basis}), {result.evaluations} simulations of "
        f"{result.options.samples} samples",
    ]
    if result.profile_source:
        head.append(f"profile: {result.profile_source}")
    if result.cost.billing_source:
        head.append(
            f"billing: {result.cost.billing_weight:g} units per {result.cost.device}-hour "
            f"({result.cost.billing_source})"
        )
    if not result.feasible:
        head.append(
            "no plan is predicted to meet the deadline: the fastest static plan is shown; give "
            "a later --deadline or a larger --max-pool"
        )
        return "\n".join(head + _plan_lines(result, result.plan, "fastest static plan"))
    body = _plan_lines(result, result.plan, f"plan ({result.plan.kind})")
    if result.plan is not result.static:
        body += _plan_lines(result, result.static, "best static plan")
    body.append(f"saving: the best static plan costs {result.saving:.2f}x the plan")
    return "\n".join(head + body)


def plot_plan(result: PlanResult, path: Path) -> None:
    """Draw the devices held in each stage, plan against best static plan, to a PNG."""
    from hpctune.plotting import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    stages = range(result.spec.num_stages())
    for plan, label in ((result.static, "best static"), (result.plan, "plan")):
        p = plan.prediction
        ax.step(
            list(stages),
            plan.allocation.vector,
            where="mid",
            label=f"{label}: {format_duration(p.time.mean)}, {result.cost.format(p.cost.mean)}",
        )
    ax.set_xticks(list(stages))
    ax.set_xlabel("stage (rung)")
    ax.set_ylabel(f"{result.cost.device}s held")
    ax.set_title(f"deadline {format_duration(result.deadline)}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


__all__ = ["format_plan", "parse_duration", "plot_plan"]
