"""Add the ``search_space`` attribute to traces recorded before traces stored their space.

The traces of ``benchmarks/traces/`` were recorded from the jobs of ``jobs/`` (with more steps:
digits' cosine schedule ran over 30 steps); the nearest-configuration rule of the simulator
(``hpctune/simulator/nearest.py``) measures distances in that space (log scales, ranges). Traces
exported
since (``Trace.from_study``) carry it already.

    python benchmarks/add_trace_space.py
"""

from __future__ import annotations

from pathlib import Path

from hpctune.simulator.traces import Trace
from hpctune.spec import load_spec

REPO = Path(__file__).resolve().parent.parent
SOURCES = {
    "digits.h5": "jobs/digits/study.toml",
    "digits-loss.h5": "jobs/digits/study.toml",
    "diabetes.h5": "jobs/diabetes/study.toml",
    "charlm.h5": "jobs/charlm/study.toml",
}


def main() -> None:
    """Write each trace's space (the schedule's ``total_steps`` as recorded) in place."""
    for name, toml in SOURCES.items():
        path = REPO / "benchmarks/traces" / name
        trace = Trace.load(path)
        space = load_spec(REPO / toml).space.to_dict()
        for param, table in space.items():
            if table.get("type") == "schedule" and "total_steps" in table:
                recorded = trace.hparams[0][param]["total_steps"]
                table["total_steps"] = {"type": "fixed", "value": recorded}
        missing = {k for h in trace.hparams for k in h} - set(space)
        if missing:
            raise SystemExit(f"{path}: parameters {sorted(missing)} are not in {toml}")
        Trace(
            trace.curves,
            trace.epoch_seconds,
            trace.hparams,
            trace.metric,
            trace.mode,
            trace.random_level,
            trace.source,
            trace.metric_bounds,
            space,
        ).save(path)
        print(f"{path}: search_space from {toml}")


if __name__ == "__main__":
    main()
