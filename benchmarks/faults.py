"""Soak a real local study under a seeded random mix of faults; count what was lost.

    python benchmarks/faults.py                      # seed 1, at least 50 faults
    python benchmarks/faults.py --seed 7 --faults 80 --json

A 20-trial study (3 slots, 15 steps per trial, a checkpoint every step) runs with the real CLI
and local workers in a 64 MiB tmpfs of a private mount namespace (``benchmarks/_tmpfs.py``).
While it runs, faults are drawn from a seeded generator: SIGKILL of the controller (then
`hpctune resume`), SIGKILL of a worker, SIGSTOP/SIGCONT of the controller, a garbage file in the
inbox, a full disk for 0.5-3 s (a filler file until ENOSPC: checkpoints, event lines, journal
chunks and small files all fail while it lasts), a flipped byte in an event line no controller
has ingested yet, and a second controller started while one runs. Five trials carry user-code
faults: a step that hangs (``report_timeout``), a process that dies, an exception (then
`hpctune retry --failed`), and two functions that return early. At the end it prints the faults
injected and six figures, which should all be 0:

* trials lost: a trial that should complete (or end early) did not;
* metric rows lost: rows of the study metric missing and not reported as missing (a corrupted
  line loses its own row, which must be counted in the trial's ``missing_rows``);
* rows duplicated: valid rows with the same trial and step;
* journals unreadable: `open_study` failures while it runs and at the end;
* trials wrongly completed: ``completed`` without every step, or a function that returned early.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks._tmpfs import fill, free, tmpfs_command  # noqa: E402

NUM_TRIALS, MAX_STEPS, SLOTS = 20, 15, 3
USER_FAULTS = {2: "hang_once", 6: "crash_once", 10: "fail_once", 14: "early", 17: "early"}
EARLY_STEP = 4
TRAIN = f"""
import os, time
from pathlib import Path

def train(ctx):
    kind = ctx.params["plan"].split(",")[ctx.params["k"]]
    marker = Path(ctx.study_dir) / f"fault-{{ctx.trial_id}}"
    state = ctx.load_checkpoint() or {{"total": 0.0}}
    for step in range(ctx.start_step + 1, ctx.max_steps + 1):
        time.sleep(ctx.params["sleep"])
        if step == 5 and kind.endswith("_once") and not marker.exists():
            marker.touch()
            if kind == "hang_once":
                time.sleep(3600)
            if kind == "crash_once":
                os._exit(7)
            raise ValueError("a bug that a fix and `hpctune retry` get past")
        score = (ctx.params["k"] + 1) * step / 1000
        state["total"] += score
        result = ctx.report(step=step, score=score, total=state["total"])
        ctx.save_checkpoint(state)
        if kind == "early" and step == {EARLY_STEP}:
            return
        if result.should_stop:
            return
"""
GARBAGE = [
    b'{"command": "stop_trial", "trial": "abc"}',
    b'{"command": "stop_trial", "trial": null}',
    b"[1, 2, 3]",
    b'{"command": "reboot"}',
    b"\x00\xff not json",
    b'"stop"',
    b'{"command": "retry"}',
]


def _spec(folder: Path) -> Path:
    plan = ",".join(USER_FAULTS.get(k, "ok") for k in range(NUM_TRIALS))
    (folder / "train.py").write_text(TRAIN)
    ks = ", ".join(str(k) for k in range(NUM_TRIALS))
    (folder / "study.toml").write_text(
        f"""[study]
name = "soak"
directory = "study"
entry_point = "train.py:train"
metric = "score"
mode = "max"
max_steps = {MAX_STEPS}
seed = 1
max_retries = 30
report_timeout = 4

[search_space]
k = [{ks}]
plan = "{plan}"
sleep = 0.5

[generator]
name = "grid"

[resources]
slots = {SLOTS}
"""
    )
    return folder / "study.toml"


class Soak:
    """One soak run inside the tmpfs ``root``."""

    def __init__(self, root: Path, seed: int, faults: int) -> None:
        self.root = root
        self.rng = random.Random(seed)
        self.target = faults
        self.study = root / "study"
        self.spec = _spec(root)
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", "HPCTUNE_CONTROLLER_TIMEOUT": "30"}
        self.controller: subprocess.Popen[bytes] | None = None
        self.faults: collections.Counter[str] = collections.Counter()
        self.unreadable = 0
        self.refused_second = 0
        self.retries_sent = 0
        self.log = open(root / "soak-controllers.log", "ab")  # noqa: SIM115

    def _start(self, *args: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "hpctune.cli", *args],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.root,
            start_new_session=True,
        )

    def _resume(self) -> None:
        self.controller = self._start("resume", str(self.study), "--local")

    def _record(self) -> Any:
        from hpctune.api import open_study

        try:
            return open_study(self.study).record
        except Exception as exc:  # any failure to read counts
            print(f"journal unreadable: {type(exc).__name__}: {exc}", file=sys.stderr)
            self.unreadable += 1
            return None

    def run(self) -> dict[str, Any]:
        self.controller = self._start("launch", str(self.spec), "--local")
        while not (self.study / "journal.zarr").exists():
            time.sleep(0.1)
        injected = 0
        while True:
            time.sleep(self.rng.uniform(0.2, 0.8))
            alive = self.controller is not None and self.controller.poll() is None
            if not alive and not self._carry_on():
                break
            if injected < self.target and self.controller is not None:
                self._inject(self.rng.choice(FAULTS))
                injected += 1
            self._record()
        self._end()
        return self.figures()

    def _carry_on(self) -> bool:
        """The controller has exited: resume it unless the study is over (retrying failures)."""
        record = self._record()
        if record is None:
            return True
        failed = [t for t in record.trials.values() if t.status.value == "failed"]
        if failed:
            subprocess.run(
                [sys.executable, "-m", "hpctune.cli", "retry", str(self.study), "--failed"],
                env=self.env,
                capture_output=True,
                check=True,
            )
            self.retries_sent += 1
        elif record.state.value == "finished" and len(record.trials) == NUM_TRIALS:
            return False
        self._resume()
        return True

    def _end(self) -> None:
        """Wait for the last controller and its workers."""
        if self.controller is not None:
            self.controller.wait(timeout=600)
        self.log.close()

    # -- faults -----------------------------------------------------------------------------

    def _inject(self, kind: str) -> None:
        getattr(self, f"_fault_{kind}")()
        self.faults[kind] += 1

    def _fault_kill_controller(self) -> None:
        assert self.controller is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.controller.pid, signal.SIGKILL)
        self.controller.wait()
        time.sleep(self.rng.uniform(0.0, 1.0))
        self._carry_on()

    def _fault_kill_worker(self) -> None:
        record = self._record()
        live = (
            []
            if record is None
            else [w for w in record.workers.values() if w.state in ("started", "stopping")]
        )
        pids = [int(w.info["pid"]) for w in live if w.info.get("pid")]
        if pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.rng.choice(pids), signal.SIGKILL)

    def _fault_stop_controller(self) -> None:
        assert self.controller is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.controller.pid, signal.SIGSTOP)
            time.sleep(self.rng.uniform(0.5, 3.0))
            os.kill(self.controller.pid, signal.SIGCONT)

    def _fault_inbox_garbage(self) -> None:
        inbox = self.study / "inbox"
        name = f"garbage-{time.time():.6f}.json"
        with contextlib.suppress(OSError):  # the disk may be full
            (inbox / name).write_bytes(self.rng.choice(GARBAGE))
            old = time.time() - 60
            os.utime(inbox / name, (old, old))

    def _fault_full_disk(self) -> None:
        filler = fill(self.root)
        time.sleep(self.rng.uniform(0.5, 3.0))
        free(filler)

    def _fault_corrupt_line(self) -> None:
        """Flip a byte of a report line beyond the journal's committed cursor (not ingested)."""
        from hpctune.journal.store import JournalReader
        from hpctune.wire.eventlog import decode_line

        assert self.controller is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.controller.pid, signal.SIGSTOP)
        try:
            cursors = JournalReader(self.study / "journal.zarr").cursors
            files = sorted((self.study / "events").glob("*.jsonl"))
            candidates = []
            for path in files:
                if path.name not in cursors:
                    continue
                data = path.read_bytes()
                offset = cursors[path.name]
                for line in data[offset:].split(b"\n")[:-1]:
                    record = decode_line(line)
                    if record is not None and record.get("kind") == "report":
                        candidates.append((path, offset))
                    offset += len(line) + 1
            if candidates:
                path, offset = self.rng.choice(candidates)
                with open(path, "r+b") as f:
                    f.seek(offset)
                    line = f.readline()
                    at = line.index(b'"t":') + 6
                    f.seek(offset + at)
                    f.write(bytes([line[at] ^ 0x01]))
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.controller.pid, signal.SIGCONT)

    def _fault_second_controller(self) -> None:
        second = self._start("resume", str(self.study), "--local")
        if second.wait(timeout=120) == 2:
            self.refused_second += 1

    # -- figures ----------------------------------------------------------------------------

    def figures(self) -> dict[str, Any]:
        from hpctune.api import open_study

        try:
            study = open_study(self.study)
        except Exception:
            self.unreadable += 1
            raise
        frame = study.metrics_frame()
        rows = frame[~frame["score"].isna()]
        duplicated = int(rows.duplicated(["trial", "step"]).sum())
        lost_trials = rows_lost = wrongly = reported_missing = wrong_values = 0
        for k in range(NUM_TRIALS):
            kind = USER_FAULTS.get(k, "ok")
            expected_status = "ended_early" if kind == "early" else "completed"
            last = EARLY_STEP if kind == "early" else MAX_STEPS
            if k >= len(study.trials):
                lost_trials += 1
                rows_lost += last
                continue
            trial = study.trial(k)
            steps = set(rows[rows.trial == k].step.tolist())
            missing = len(set(range(1, last + 1)) - steps)
            reported_missing += trial.missing_rows
            rows_lost += max(missing - trial.missing_rows, 0)
            curve = study.curve(k)
            expected = [(k + 1) * s / 1000 for s in curve.steps]
            pairs = zip(curve.values, expected, strict=True)
            wrong_values += sum(abs(a - b) > 1e-12 for a, b in pairs)
            if trial.status.value != expected_status:
                lost_trials += trial.status.value != "completed"
                wrongly += trial.status.value == "completed"
            elif trial.status.value == "completed" and missing > trial.missing_rows:
                wrongly += 1
        storage = _storage_hits(self.study)
        return {
            "faults": dict(self.faults),
            "faults_injected": sum(self.faults.values()) + len(USER_FAULTS),
            "user_code_faults": len(USER_FAULTS),
            "enospc_hits": storage,
            "second_controllers_refused": self.refused_second,
            "retry_commands": self.retries_sent,
            "controller_starts": study.record.controller_starts,
            "rejected_inbox_files": len(study.record.rejected_commands),
            "rows_reported_missing": reported_missing,
            "trials_lost": lost_trials,
            "metric_rows_lost": rows_lost,
            "rows_duplicated": duplicated,
            "journals_unreadable": self.unreadable,
            "trials_wrongly_completed": wrongly,
            "wrong_values": wrong_values,
            "state": study.record.state.value,
        }


FAULTS = [
    "kill_controller",
    "kill_worker",
    "stop_controller",
    "inbox_garbage",
    "full_disk",
    "corrupt_line",
    "second_controller",
]


def _storage_hits(study: Path) -> dict[str, int]:
    """Which writes met ENOSPC, from the controller's and the workers' logs."""
    hits: collections.Counter[str] = collections.Counter()
    texts = [study / "logs" / "controller.log", *(study / "logs" / "workers").glob("*.log")]
    for path in texts:
        with contextlib.suppress(OSError):
            for line in path.read_text(errors="replace").splitlines():
                if "ENOSPC" not in line and "No space left" not in line:
                    continue
                if "checkpoint" in line:
                    hits["checkpoint"] += 1
                elif "the report of step" in line or "end line" in line or "cannot start" in line:
                    hits["event line"] += 1
                elif "the journal" in line:
                    hits["journal"] += 1
                else:
                    hits["other file"] += 1
    return dict(hits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--faults", type=int, default=50, help="faults to inject (at least)")
    parser.add_argument("--json", action="store_true", help="print one JSON object only")
    parser.add_argument("--inside", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside is None:  # re-run inside a private tmpfs
        with tempfile.TemporaryDirectory(prefix="hpctune-soak-") as tmp:
            argv = [sys.executable, __file__, "--inside", tmp, *sys.argv[1:]]
            sys.exit(subprocess.run(tmpfs_command(Path(tmp), 64, argv), check=False).returncode)
    started = time.monotonic()
    figures = Soak(args.inside, args.seed, args.faults).run()
    figures["seconds"] = round(time.monotonic() - started, 1)
    figures["seed"] = args.seed
    if args.json:
        print(json.dumps(figures))
        return
    print(f"seed {args.seed}, {figures['seconds']} s, study {figures['state']}")
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(figures["faults"].items()))
    print(f"faults injected: {figures['faults_injected']} ({kinds}, user code {len(USER_FAULTS)})")
    print(f"  writes that met ENOSPC: {figures['enospc_hits']}")
    print(
        f"  controller starts {figures['controller_starts']}, second controllers refused "
        f"{figures['second_controllers_refused']}, inbox files rejected "
        f"{figures['rejected_inbox_files']}, retry commands {figures['retry_commands']}"
    )
    for key in (
        "trials_lost",
        "metric_rows_lost",
        "rows_duplicated",
        "journals_unreadable",
        "trials_wrongly_completed",
    ):
        print(f"{key.replace('_', ' ')}: {figures[key]}")
    print(
        f"(rows reported missing: {figures['rows_reported_missing']}; wrong values: "
        f"{figures['wrong_values']})"
    )


if __name__ == "__main__":
    main()
