"""Scale: the controller, the readers, the policies and the simulator at thousands of trials.

Every case is built with the project's own code: a real study directory (``create_study``), a
journal history written with ``JournalWriter`` the way the controller writes it (each trial a
segment, a report and a checkpoint per step, the previous checkpoint deleted), a real
``Controller`` resumed on it whose workers are in-process fakes writing real heartbeat and
event files (``EventWriter``), and a synthetic trace for the simulator. Each figure is printed
with the machine's load average (1 min) when it was taken.

    python benchmarks/scale.py                 # every case at the issue's sizes
    python benchmarks/scale.py --quick         # small sizes (CI smoke run)
    python benchmarks/scale.py --only pass,open,growth

Cases (issue 15's table): ``active`` (a pass with 1,000 running trials all reporting at a
boundary, ASHA: pass seconds = the decision latency a worker waits, p50/p99 over passes, and
the files written per trial-step); ``pass`` (10,000 trials in the study, 20 reporting);
``median`` (median stopping, 100 running among 10,000); ``open`` (``open_study``, ``hpctune
status`` and a controller's start on 10,000 x 100 with a checkpoint per step); ``simulate``
(ASHA on 64 slots, a synthetic 10,000 x 100 trace); ``pbt`` (PBT's proposals for 100 free
slots at 10,000 trials); ``commit`` (journal commit seconds as ASHA's state grows); ``growth``
(pass seconds against trials in the study: 1k, 5k, 10k, 20k).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from hpctune.controller import Controller  # noqa: E402
from hpctune.controller.launch import create_study  # noqa: E402
from hpctune.files import dumps, write_json_atomic  # noqa: E402
from hpctune.journal import state as st  # noqa: E402
from hpctune.journal.state import CheckpointRef, StudyRecord  # noqa: E402
from hpctune.journal.store import JournalWriter  # noqa: E402
from hpctune.spec import load_spec  # noqa: E402
from hpctune.testing.fake_workers import FakeExecutor  # noqa: E402
from hpctune.wire.eventlog import EventWriter  # noqa: E402
from hpctune.wire.protocol import EV_CHECKPOINT, EV_REPORT, EV_START, Heartbeat  # noqa: E402

SPEC = """\
[study]
name = "bench-scale"
directory = "study"
entry_point = "train.py:train"
metric = "score"
mode = "max"
max_steps = {steps}
num_trials = {trials}
seed = 0
report_timeout = 0

[search_space]
x = {{ type = "float", low = 0.0, high = 1.0 }}
y = {{ type = "float", low = 0.0, high = 1.0 }}

[policy]
{policy}

[resources]
slots = {slots}
"""


def load() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


class FakeWorkers:
    """Write, for every active segment of a controller, what its worker writes: a heartbeat,
    the start line, then a report and a checkpoint line per step."""

    def __init__(self, controller: Controller, rng: np.random.Generator) -> None:
        self.controller = controller
        self.paths = controller.paths
        self.rng = rng
        self.started = time.time()
        self.writers: dict[int, EventWriter] = {}

    def beat(self) -> None:
        for seg in self.controller.state.active_segments():
            beat = Heartbeat(seg.worker_id, "running", seg.segment_id, started=self.started)
            path = self.paths.heartbeat(seg.worker_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(path, beat.to_dict())

    def report(self, only: int | None = None) -> int:
        """One step of every active segment (at most ``only`` of them); return how many."""
        segments = self.controller.state.active_segments()[: only or None]
        now = time.time()
        for seg in segments:
            writer = self.writers.get(seg.segment_id)
            if writer is None:
                writer = self.writers[seg.segment_id] = EventWriter(
                    self.paths.event_file(seg.segment_id)
                )
                writer.write({"kind": EV_START, "t": now, "host": "bench", "pid": 1})
            trial = self.controller.state.trials[seg.trial_id]
            step = trial.step + 1
            value = float(trial.params.get("x", 0.5)) * step / 100 + 0.01 * self.rng.random()
            writer.write(
                {"kind": EV_REPORT, "t": now, "step": step, "metrics": {"score": value}},
                fsync=True,
            )
            path = f"checkpoints/trial-{seg.trial_id:06d}/step-{step:08d}.pt"
            writer.write(
                {"kind": EV_CHECKPOINT, "t": now, "step": step, "path": path, "sha256": "",
                 "nbytes": 1000},
                fsync=True,
            )  # fmt: skip
        return len(segments)


class Counts:
    """Counts fsync, rename and mkdir calls while active."""

    def __init__(self) -> None:
        self.fsync = self.rename = self.mkdir = 0
        self._saved: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> Counts:
        self._saved = []
        for module, name, field in (
            (os, "fsync", "fsync"),
            (os, "replace", "rename"),
            (os, "rename", "rename"),
            (os, "mkdir", "mkdir"),
        ):
            original = getattr(module, name)

            def wrapped(*a: Any, _o: Any = original, _f: str = field, **k: Any) -> Any:
                setattr(self, _f, getattr(self, _f) + 1)
                return _o(*a, **k)

            self._saved.append((module, name, original))
            setattr(module, name, wrapped)
        return self

    def __exit__(self, *exc: object) -> None:
        for module, name, original in self._saved:
            setattr(module, name, original)


def build_history(
    folder: Path, trials: int, steps: int, policy: str, slots: int, active: int, seed: int = 0
) -> Path:
    """A study of ``trials`` trials ended (a checkpoint per step, the previous one deleted, as
    the controller does) plus ``active`` trials assigned and started on their workers."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text("def train(ctx):\n    pass\n")
    total = trials + active
    text = SPEC.format(trials=total, steps=steps, policy=policy, slots=slots)
    (folder / "study.toml").write_text(text)
    spec = load_spec(folder / "study.toml")
    paths = create_study(spec)
    writer = JournalWriter(paths.journal)
    record = StudyRecord(spec=spec.to_dict())
    rng = np.random.default_rng(seed)
    clock = [time.time() - total * steps * 0.01]

    def log(kind: str, trial: int = -1, segment: int = -1, **data: Any) -> None:
        text = dumps(data)
        writer.append("log", kind=kind, trial=trial, segment=segment, time=clock[0], data=text)
        record.apply(kind, trial, segment, clock[0], json.loads(text))

    log(st.STUDY, state="running", reason="controller started")
    workers = [f"w{i:04d}" for i in range(max(slots, active, 1))]
    for w in workers:
        log(st.WORKER, worker=w, event="started", info={})
        log(st.WORKER, worker=w, event="submitted", info={"fake": True})
    for trial in range(total):
        params = {"x": float(rng.random()), "y": float(rng.random())}
        log(st.TRIAL_CREATED, trial, params=params, generator_index=trial, seed=trial)
        worker = workers[trial % len(workers)] if trial < trials else workers[trial - trials]
        log(st.SEGMENT_ASSIGNED, trial, trial, worker=worker, start_step=0, until_step=steps,
            checkpoint_row=None)  # fmt: skip
        log(st.SEGMENT_STARTED, trial, trial, host="bench", pid=1, at=clock[0])
        if trial >= trials:
            continue  # running: its worker reports from here on
        end = steps if rng.random() < 0.5 else int(rng.integers(1, steps))
        previous = None
        for step in range(1, end + 1):
            clock[0] += 0.01
            value = params["x"] * step / steps
            writer.append_metrics(trial, trial, step, clock[0], {"score": value})
            record.add_report(trial, step, clock[0], value)
            path = f"checkpoints/trial-{trial:06d}/step-{step:08d}.pt"
            row = writer.next_index("checkpoints")
            writer.append("checkpoints", trial=trial, segment=trial, step=step, time=clock[0],
                          nbytes=1000, sha256="", path=path)  # fmt: skip
            record.add_checkpoint(CheckpointRef(row, trial, trial, step, clock[0], 1000, "", path))
            if previous is not None:
                log(st.CHECKPOINT_DELETED, rows=[previous])
            previous = row
        status = "completed" if end == steps else "terminated"
        log(st.SEGMENT_ENDED, trial, trial, status=status, step=end, reason="", at=clock[0])
        log(st.TRIAL_STATUS, trial, status=status, reason="bench")
        if trial % 200 == 199:
            writer.commit()
    writer.commit()
    return paths.root


def controller_on(root: Path) -> Controller:
    """A controller resumed on a built study, with fake workers."""
    return Controller(root, FakeExecutor(), poll_interval=0.0, decision_wait=0.0)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def passes(controller: Controller, rounds: int, reporting: int | None) -> dict[str, Any]:
    """Run ``rounds`` passes in each of which ``reporting`` running trials report one step at a
    boundary; the pass seconds (decision latency), and files per trial-step."""
    workers = FakeWorkers(controller, np.random.default_rng(1))
    workers.beat()
    times: list[float] = []
    commits: list[float] = []
    reported = 0
    original = controller.core.writer.commit

    def commit(*a: Any, **k: Any) -> None:
        _, seconds = timed(lambda: original(*a, **k))
        commits.append(seconds)

    controller.core.writer.commit = commit  # type: ignore[method-assign]
    counts = Counts()
    for _ in range(rounds):
        reported += workers.report(reporting)
        workers.beat()
        with counts:  # the controller's own file operations only
            _, seconds = timed(controller.step)
        times.append(seconds)
    controller.core.writer.commit = original  # type: ignore[method-assign]
    steps = max(reported, 1)
    return {
        "pass_p50_s": round(float(np.percentile(times, 50)), 4),
        "pass_p99_s": round(float(np.percentile(times, 99)), 4),
        "commit_first_s": round(commits[0], 4) if commits else None,
        "commit_last_s": round(commits[-1], 4) if commits else None,
        "controller_fsyncs_per_trial_step": round(counts.fsync / steps, 2),
        "controller_renames_per_trial_step": round(counts.rename / steps, 2),
        "controller_mkdirs_per_trial_step": round(counts.mkdir / steps, 2),
        "load": round(load(), 2),
    }


ASHA = 'name = "asha"\nreduction_factor = 4\nmax_t = 100'
MEDIAN = 'name = "median"\ngrace_period = 1\nmin_samples_required = 3'


def case_active(tmp: Path, n: int) -> dict[str, Any]:
    root = build_history(tmp / "active", 0, 100, ASHA, n, n)
    controller = controller_on(root)
    controller.start()
    return {"case": "active", "running": n, "goal": "p99 < 1 s", **passes(controller, 8, None)}


def case_pass(tmp: Path, trials: int, policy: str, active: int, name: str) -> dict[str, Any]:
    root = build_history(tmp / name, trials, 100, policy, active, active)
    controller, start_s = timed(lambda: controller_on(root))
    controller.start()
    figures = passes(controller, 6, active)
    return {"case": name, "trials": trials, "running": active, "start_s": round(start_s, 2),
            **figures}  # fmt: skip


def case_open(tmp: Path, trials: int, steps: int) -> dict[str, Any]:
    root, build_s = timed(lambda: build_history(tmp / "open", trials, steps, ASHA, 8, 0))
    from hpctune.api import open_study

    _, open_s = timed(lambda: open_study(root))
    command = [sys.executable, "-m", "hpctune.cli", "status", str(root)]
    _, status_s = timed(lambda: subprocess.run(command, capture_output=True, check=False))
    _, restart_s = timed(lambda: controller_on(root))
    return {"case": "open", "trials": trials, "steps": steps, "build_s": round(build_s, 1),
            "open_study_s": round(open_s, 2), "status_s": round(status_s, 2),
            "controller_start_s": round(restart_s, 2), "goal": "< 3 s",
            "load": round(load(), 2)}  # fmt: skip


def case_simulate(configs: int, steps: int) -> dict[str, Any]:
    from hpctune.simulator import simulate
    from hpctune.simulator.traces import Trace

    rng = np.random.default_rng(0)
    quality = rng.random(configs)
    rate = 5 + 30 * rng.random(configs)
    s = np.arange(1, steps + 1)
    curves = quality[:, None] * (1 - np.exp(-s[None, :] / rate[:, None]))
    curves += 0.01 * rng.standard_normal(curves.shape)
    trace = Trace(
        curves, np.full((configs, steps), 1.0),
        tuple({"x": float(q)} for q in quality), metric="score", mode="max", random_level=0.0,
    )  # fmt: skip
    result, seconds = timed(lambda: simulate(trace, "asha", {"reduction_factor": 4}, slots=64))
    return {"case": "simulate", "configs": configs, "steps": steps, "slots": 64,
            "seconds": round(seconds, 1), "trials_started": result.trials_started,
            "goal": "< 60 s", "load": round(load(), 2)}  # fmt: skip


def case_pbt(trials: int, free: int) -> dict[str, Any]:
    from hpctune.policies import Event, StudyContext, StudyView, TrialView, make_policy
    from hpctune.study.space import SearchSpace
    from hpctune.study.states import TrialStatus

    population = 100
    rng = np.random.default_rng(0)
    views = {}
    for tid in range(trials):
        generation = tid // population
        views[tid] = TrialView(
            trial_id=tid, status=TrialStatus.COMPLETED, params={"x": float(rng.random())},
            step=(generation + 1) * 2, steps=np.array([(generation + 1) * 2]),
            values=np.array([rng.random()]), times=np.array([float(tid)]),
            checkpoint_step=(generation + 1) * 2,
            parent_trial=None if generation == 0 else tid - population,
            parent_step=None if generation == 0 else generation * 2, end_step=(generation + 1) * 2,
            generation=generation, initiator=None if generation == 0 else tid - population,
            last_metrics={"score": float(rng.random())},
        )  # fmt: skip
    space = SearchSpace.from_dict({"x": {"type": "float", "low": 0.0, "high": 1.0}})
    view = StudyView(
        metric="score", mode="max", max_steps=10**6, boundary=1, now=float(trials),
        trials=views, free_slots=free, total_slots=free, trials_remaining=None, space=space,
    )  # fmt: skip
    options = {"population_size": population, "steps_per_generation": 2}
    policy = make_policy("pbt", options, StudyContext(max_steps=view.max_steps))
    actions, seconds = timed(
        lambda: list(policy.decide(view, Event.slot_free(free), np.random.default_rng(0)).actions)
    )
    return {"case": "pbt", "trials": trials, "free_slots": free, "seconds": round(seconds, 3),
            "actions": len(actions), "goal": "< 0.1 s", "load": round(load(), 2)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Run the cases; print one JSON line per case."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (CI smoke run)")
    parser.add_argument(
        "--only", default="active,pass,median,open,simulate,pbt,growth",
        help="comma-separated cases",
    )  # fmt: skip
    args = parser.parse_args(argv)
    cases = set(args.only.split(","))
    q = args.quick
    big = 300 if q else 10_000
    tmp = Path(tempfile.mkdtemp(prefix="hpctune-scale-"))
    try:
        out: list[dict[str, Any]] = []

        def emit(figures: dict[str, Any]) -> None:
            out.append(figures)
            print(json.dumps(figures), flush=True)

        if "active" in cases:
            emit(case_active(tmp, 50 if q else 1000))
        if "pass" in cases:
            emit({**case_pass(tmp, big, ASHA, 20, "pass"), "goal": "< 0.1 s"})
        if "median" in cases:
            emit({**case_pass(tmp, big, MEDIAN, 100, "median"), "goal": "< 0.5 s"})
        if "open" in cases:
            emit(case_open(tmp, big, 20 if q else 100))
        if "simulate" in cases:
            emit(case_simulate(500 if q else 10_000, 20 if q else 100))
        if "pbt" in cases:
            emit(case_pbt(big, 100))
        if "growth" in cases:
            for size in (100, 300) if q else (1000, 5000, 10_000, 20_000):
                figures = case_pass(tmp, size, ASHA, 20, f"growth-{size}")
                emit({"case": "growth", "trials": size, "pass_p50_s": figures["pass_p50_s"],
                      "start_s": figures["start_s"], "load": figures["load"]})  # fmt: skip
                shutil.rmtree(tmp / f"growth-{size}", ignore_errors=True)
        return 0 if out else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
