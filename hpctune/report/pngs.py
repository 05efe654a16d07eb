"""The report's static PNGs (matplotlib), one per section with a plot, for terminals and mail."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpctune.analysis.lineage import plot_lineage
from hpctune.plotting import metric_scale, pyplot
from hpctune.stagetree.plots import plot_stage_tree
from hpctune.stagetree.status import study_stage_tree

if TYPE_CHECKING:
    from hpctune.journal.reader import StudyReader

STATE_COLOURS = {
    "completed": "tab:green",
    "terminated": "tab:orange",
    "failed": "tab:red",
    "running": "tab:blue",
    "suspended": "tab:purple",
    "queued": "tab:gray",
}
SPARE = ["tab:brown", "tab:pink", "tab:cyan", "tab:olive"]


def state_colour(state: str, states: list[str]) -> str:
    """The colour of a trial state (states added later get spare colours, never an error)."""
    if state in STATE_COLOURS:
        return STATE_COLOURS[state]
    return SPARE[max(states.index(state), 0) % len(SPARE) if state in states else 0]


def write_pngs(study: StudyReader, data: dict[str, Any], out: Path) -> dict[str, str]:
    """Write the PNGs into ``out``; return ``{section: file name}``."""
    plt = pyplot()
    from matplotlib.collections import LineCollection

    ov = data["overview"]
    metric, mode, unit = ov["metric"], ov["mode"], ov["step_unit"]
    written: dict[str, str] = {}

    def save(fig: Any, key: str, name: str, left: float = 0.08) -> None:
        # fixed margins: tight_layout measures every tick label, seconds on a large study
        fig.subplots_adjust(left=left, right=0.98, bottom=0.14, top=0.96, wspace=0.3, hspace=0.45)
        fig.savefig(out / name, dpi=100)
        plt.close(fig)
        written[key] = name

    best = data["best_so_far"]
    if best["values"]:
        fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
        for ax, xs, label in (
            (axes[0], [s / 60 for s in best["seconds"]], "minutes since the study started"),
            (axes[1], best["hours"], f"{best['unit']} allocated"),
        ):
            ax.step(xs, best["values"], where="post", marker=".")
            ax.set_xlabel(label)
            ax.set_ylabel(f"best {metric} so far")
            metric_scale(ax, best["values"], mode)
        save(fig, "progress", "best_so_far.png")

    trials = [t for t in data["trials"] if t["steps"]]
    if trials:
        fig, ax = plt.subplots(figsize=(11, 4.6))
        values: list[float] = []
        for state in dict.fromkeys(t["status"] for t in trials):
            segs = [
                list(
                    zip(
                        t["steps"],
                        [math.nan if v is None else v for v in t["values"]],
                        strict=True,
                    )
                )
                for t in trials
                if t["status"] == state
            ]
            values.extend(
                v for t in trials if t["status"] == state for v in t["values"] if v is not None
            )
            ax.add_collection(
                LineCollection(
                    segs,
                    colors=state_colour(state, data["states"]),
                    linewidths=0.8,
                    alpha=0.7,
                    label=state,
                )
            )
        for p in (data["predictions"] or [])[:3]:  # the 3 best trials', as on the page
            ax.fill_between(p["steps"], [_n(v) for v in p["low"]], [_n(v) for v in p["high"]],
                            color="tab:blue", alpha=0.08, linewidth=0)  # fmt: skip
            ax.plot(p["steps"], [_n(v) for v in p["median"]], ":", color="tab:blue", lw=1)
        ax.set_xlim(0, ov["max_steps"])
        metric_scale(ax, values, mode)
        ax.set_xlabel(unit)
        ax.set_ylabel(metric)
        ax.legend(loc="best", fontsize=8)
        save(fig, "curves", "curves.png")

    pools = data["pools"]
    if pools is not None:
        fig, ax = plt.subplots(figsize=(11, 3.2))
        minutes = [s / 60 for s in pools["seconds"]]
        promising = pools["promising_slots"]
        ax.stackplot(minutes, promising, [pools["slots"] - p for p in promising], step="post",
                     labels=["promising pool", "opportunistic pool"],
                     colors=["tab:green", "tab:orange"], alpha=0.7)  # fmt: skip
        ax.set_xlabel("minutes since the study started")
        ax.set_ylabel(f"slots (of {pools['slots']})")
        ax.legend(loc="upper right", fontsize=8)
        save(fig, "pools", "pools.png")

    if data["lineage"] is not None:
        plot_lineage(study.record, out / "lineage.png", highlight=data["lineage"]["best"])
        written["lineage"] = "lineage.png"

    if data["stages"] is not None:
        tree, statuses = study_stage_tree(study.record, int(ov["max_steps"]))
        plot_stage_tree(tree, out / "stages.png", title=f"{ov['name']}: stage tree",
                        unit=unit, statuses=statuses)  # fmt: skip
        written["stages"] = "stages.png"

    imp = data["importance"]
    if imp is not None and "importance" in imp:
        names = list(imp["importance"])[::-1]
        fig, ax = plt.subplots(figsize=(8, 0.8 + 0.35 * len(names)))
        ax.barh(names, [imp["importance"][n] for n in names], color="tab:blue")
        ax.set_xlim(0, 1)
        ax.set_xlabel(f"share of the variance of {metric} (fANOVA)")
        save(fig, "importance", "importance.png", left=0.25)

    dims = data["dimensions"]
    valued = [t for t in data["trials"] if t["value"] is not None]
    if dims and valued:
        cols = min(3, len(dims))
        rows = math.ceil(len(dims) / cols)
        fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
        for ax in axes.ravel()[len(dims) :]:
            ax.set_visible(False)
        ys = [t["value"] for t in valued]
        colours = [state_colour(t["status"], data["states"]) for t in valued]
        for i, d in enumerate(dims):
            ax = axes.ravel()[i]
            xs = [t["dims"][i] for t in valued]
            if d["kind"] == "categorical":
                cats = [c for c in d["choices"] if c in {str(x) for x in xs}] or ["-"]
                xs = [cats.index(str(x)) if str(x) in cats else math.nan for x in xs]
                ax.set_xticks(range(len(cats)), [c[:14] for c in cats], fontsize=7, rotation=20)
            elif d["log"]:
                ax.set_xscale("log")
            ax.scatter([math.nan if x is None else x for x in xs], ys, c=colours, s=14, alpha=0.8)
            ax.set_xlabel(d["name"])
            ax.set_ylabel(metric)
            metric_scale(ax, ys, mode)
        save(fig, "slices", "slices.png")
    return written


def _n(value: float | None) -> float:
    return math.nan if value is None else value


__all__ = ["state_colour", "write_pngs"]
