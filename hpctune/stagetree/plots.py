"""A drawing of a stage tree (matplotlib, headless): stages as bars over steps."""

from __future__ import annotations

from pathlib import Path

from hpctune.stagetree.pieces import describe_config
from hpctune.stagetree.tree import StageTree


def stage_rows(tree: StageTree) -> list[float]:
    """A row per stage: leaves in depth-first order, a parent at the mean of its children."""
    row = [0.0] * len(tree.stages)
    next_leaf = 0.0
    order: list[int] = []
    stack = list(reversed(tree.roots))
    while stack:
        sid = stack.pop()
        order.append(sid)
        stack.extend(reversed(tree.stages[sid].children))
    for sid in order:  # depth-first: leaves in drawing order
        if not tree.stages[sid].children:
            row[sid] = next_leaf
            next_leaf += 1
    for stage in reversed(tree.stages):  # children have larger ids than parents
        if stage.children:
            row[stage.id] = sum(row[c] for c in stage.children) / len(stage.children)
    return row


STATUS_COLOURS = {
    "done": "tab:green",
    "running": "tab:orange",
    "pending": "0.7",
    "released": "tab:red",
}


def plot_stage_tree(
    tree: StageTree,
    path: Path | str,
    *,
    title: str = "",
    unit: str = "step",
    statuses: list[str] | None = None,
) -> Path:
    """Draw the stage tree to ``path`` (PNG, or any format matplotlib infers from the suffix).

    Each stage is a bar from its start to its end step, coloured by the trials it serves (or by
    its status when ``statuses`` are given: done, running, pending, released); a vertical line
    joins it to its parent's end. Stages are labelled with the pieces that change when there
    are at most 40 of them.

    Raises:
        UsageError: matplotlib is not installed.
    """
    from hpctune.plotting import pyplot

    plt = pyplot()
    path = Path(path)
    row = stage_rows(tree)
    served = [len(s.trials) for s in tree.stages]
    for stage in reversed(tree.stages):
        if stage.parent is not None:
            served[stage.parent] += served[stage.id]
    most = max(served, default=1)
    height = max(3.0, 0.3 * (max(row, default=0) + 2))
    fig, ax = plt.subplots(figsize=(10, min(height, 40)))
    cmap = plt.get_cmap("viridis")
    for stage in tree.stages:
        y = row[stage.id]
        colour = (
            cmap(served[stage.id] / most)
            if statuses is None
            else STATUS_COLOURS[statuses[stage.id]]
        )
        ax.plot([stage.start, stage.end], [y, y], color=colour, linewidth=4, solid_capstyle="butt")
        if stage.parent is not None:
            ax.plot([stage.start, stage.start], [row[stage.parent], y], color="0.6", linewidth=1)
        if len(tree.stages) <= 40:
            parent = None if stage.parent is None else tree.stages[stage.parent]
            changed = (
                None
                if parent is None
                else {n for n, p in stage.config if dict(parent.config).get(n) != p}
            )
            text = describe_config(stage.config, changed) if changed != set() else ""
            ax.annotate(
                f"{served[stage.id]}: {text}"[:60],
                (stage.start, y),
                xytext=(2, 3),
                textcoords="offset points",
                fontsize=6,
            )
    ax.set_xlabel(unit)
    ax.set_yticks([])
    ax.invert_yaxis()
    if statuses is None:
        scale = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(0, most))
        fig.colorbar(scale, ax=ax, label="trials served")
    else:
        from matplotlib.lines import Line2D

        handles = [
            Line2D([], [], color=c, linewidth=4, label=s)
            for s, c in STATUS_COLOURS.items()
            if s in statuses
        ]
        ax.legend(handles=handles, loc="lower right", fontsize=7)
    ax.set_title(title or f"stage tree: {len(tree.stages)} stages")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


__all__ = ["plot_stage_tree", "stage_rows"]
