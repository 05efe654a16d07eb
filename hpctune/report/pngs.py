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
    pngs = _Pngs(data, out)
    ov = data["overview"]
    if data["best_so_far"]["values"]:
        pngs.progress(data["best_so_far"])
    trials = [t for t in data["trials"] if t["steps"]]
    if trials:
        pngs.curves(trials, data["predictions"] or [])
    if data["pools"] is not None:
        pngs.pools(data["pools"])
    if data["lineage"] is not None:
        plot_lineage(study.record, out / "lineage.png", highlight=data["lineage"]["best"])
        pngs.written["lineage"] = "lineage.png"
    if data["stages"] is not None:
        tree, statuses = study_stage_tree(study.record, int(ov["max_steps"]))
        plot_stage_tree(tree, out / "stages.png", title=f"{ov['name']}: stage tree",
                        unit=ov["step_unit"], statuses=statuses)  # fmt: skip
        pngs.written["stages"] = "stages.png"
    imp = data["importance"]
    if imp is not None and "importance" in imp:
        pngs.importance(imp["importance"])
    valued = [t for t in data["trials"] if t["value"] is not None]
    if data["dimensions"] and valued:
        pngs.slices(data["dimensions"], valued)
    return pngs.written


class _Pngs:
    """The report's matplotlib figures, one method per section, saved into ``out``."""

    def __init__(self, data: dict[str, Any], out: Path) -> None:
        self.plt = pyplot()
        self.out = out
        self.states: list[str] = data["states"]
        ov = data["overview"]
        self.metric, self.mode, self.unit = ov["metric"], ov["mode"], ov["step_unit"]
        self.max_steps = ov["max_steps"]
        self.written: dict[str, str] = {}

    def save(self, fig: Any, key: str, name: str, left: float = 0.08) -> None:
        """Save ``fig`` as ``name`` for the section ``key`` and close it."""
        # fixed margins: tight_layout measures every tick label, seconds on a large study
        fig.subplots_adjust(left=left, right=0.98, bottom=0.14, top=0.96, wspace=0.3, hspace=0.45)
        fig.savefig(self.out / name, dpi=100)
        self.plt.close(fig)
        self.written[key] = name

    def progress(self, best: dict[str, Any]) -> None:
        """The best value so far against minutes and allocated hours."""
        fig, axes = self.plt.subplots(1, 2, figsize=(11, 3.8))
        for ax, xs, label in (
            (axes[0], [s / 60 for s in best["seconds"]], "minutes since the study started"),
            (axes[1], best["hours"], f"{best['unit']} allocated"),
        ):
            ax.step(xs, best["values"], where="post", marker=".")
            ax.set_xlabel(label)
            ax.set_ylabel(f"best {self.metric} so far")
            metric_scale(ax, best["values"], self.mode)
        self.save(fig, "progress", "best_so_far.png")

    def curves(self, trials: list[dict[str, Any]], predictions: list[dict[str, Any]]) -> None:
        """Every trial's curve, coloured by status, and the 3 best trials' predictions."""
        from matplotlib.collections import LineCollection  # matplotlib only when drawing

        fig, ax = self.plt.subplots(figsize=(11, 4.6))
        values: list[float] = []
        for state in dict.fromkeys(t["status"] for t in trials):
            mine = [t for t in trials if t["status"] == state]
            segs = [list(zip(t["steps"], [_n(v) for v in t["values"]], strict=True)) for t in mine]
            values.extend(v for t in mine for v in t["values"] if v is not None)
            ax.add_collection(
                LineCollection(
                    segs,
                    colors=state_colour(state, self.states),
                    linewidths=0.8,
                    alpha=0.7,
                    label=state,
                )
            )
        for p in predictions[:3]:  # the 3 best trials', as on the page
            ax.fill_between(p["steps"], [_n(v) for v in p["low"]], [_n(v) for v in p["high"]],
                            color="tab:blue", alpha=0.08, linewidth=0)  # fmt: skip
            ax.plot(p["steps"], [_n(v) for v in p["median"]], ":", color="tab:blue", lw=1)
        ax.set_xlim(0, self.max_steps)
        metric_scale(ax, values, self.mode)
        ax.set_xlabel(self.unit)
        ax.set_ylabel(self.metric)
        ax.legend(loc="best", fontsize=8)
        self.save(fig, "curves", "curves.png")

    def pools(self, pools: dict[str, Any]) -> None:
        """POP's promising and opportunistic pools over time."""
        fig, ax = self.plt.subplots(figsize=(11, 3.2))
        minutes = [s / 60 for s in pools["seconds"]]
        promising = pools["promising_slots"]
        ax.stackplot(minutes, promising, [pools["slots"] - p for p in promising], step="post",
                     labels=["promising pool", "opportunistic pool"],
                     colors=["tab:green", "tab:orange"], alpha=0.7)  # fmt: skip
        ax.set_xlabel("minutes since the study started")
        ax.set_ylabel(f"slots (of {pools['slots']})")
        ax.legend(loc="upper right", fontsize=8)
        self.save(fig, "pools", "pools.png")

    def importance(self, importance: dict[str, float]) -> None:
        """fANOVA's share of the variance per parameter."""
        names = list(importance)[::-1]
        fig, ax = self.plt.subplots(figsize=(8, 0.8 + 0.35 * len(names)))
        ax.barh(names, [importance[n] for n in names], color="tab:blue")
        ax.set_xlim(0, 1)
        ax.set_xlabel(f"share of the variance of {self.metric} (fANOVA)")
        self.save(fig, "importance", "importance.png", left=0.25)

    def slices(self, dims: list[dict[str, Any]], valued: list[dict[str, Any]]) -> None:
        """The value of each trial against each searched dimension."""
        cols = min(3, len(dims))
        rows = math.ceil(len(dims) / cols)
        fig, axes = self.plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
        for ax in axes.ravel()[len(dims) :]:
            ax.set_visible(False)
        ys = [t["value"] for t in valued]
        colours = [state_colour(t["status"], self.states) for t in valued]
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
            ax.set_ylabel(self.metric)
            metric_scale(ax, ys, self.mode)
        self.save(fig, "slices", "slices.png")


def _n(value: float | None) -> float:
    return math.nan if value is None else value


__all__ = ["state_colour", "write_pngs"]
