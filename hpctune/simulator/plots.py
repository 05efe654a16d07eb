"""Plots of simulated runs (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path

from hpctune.simulator._results import SimulationResult


def plot_split(result: SimulationResult, path: str | Path) -> Path:
    """POP's resource split over time (HyperDrive Fig. 4c): promising vs opportunistic slots.

    The share of promising slots is ``s_promising / slots`` from the policy states the simulator
    recorded; the rest of the slots form the opportunistic pool.

    Raises:
        ValueError: The run recorded no ``s_promising`` (not a POP run).
    """
    from hpctune.plotting import pyplot

    plt = pyplot()

    points = [(t, s["s_promising"]) for t, s in result.policy_states if "s_promising" in s]
    if not points:
        raise ValueError(f"the {result.policy} run recorded no promising slots (POP only)")
    times = [t for t, _ in points] + [result.end_time]
    shares = [min(n / result.slots, 1.0) for _, n in points]
    shares.append(shares[-1])
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.fill_between(times, 0, shares, step="post", label="promising", color="tab:blue")
    ax.fill_between(
        times, shares, 1, step="post", label="opportunistic", color="tab:orange", alpha=0.6
    )
    if result.time_to_target is not None:
        ax.axvline(result.time_to_target, color="k", linestyle="--", label="target reached")
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("share of slots")
    ax.set_ylim(0, 1)
    ax.set_title(f"POP resource split, {result.slots} slots, seed {result.seed}")
    ax.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
