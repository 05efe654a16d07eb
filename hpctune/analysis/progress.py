"""Progress of a running study: a live table on a terminal, plain periodic lines otherwise.

The same display serves ``hpctune launch --local`` (called by the controller after every
iteration) and ``hpctune status --watch`` (reading the journal again every interval, from any
shell). What it shows is computed from a :class:`~hpctune.journal.state.StudyRecord` alone
(:func:`snapshot`): trials by state, the best so far, the running trials with their step and
speed, and a bar with an ETA.

The ETA divides the remaining work by the measured speed: remaining steps are those of trials not
ended (to their end step) and of trials the generator has not created yet (``max_steps`` each;
under population based training, every population member trains to ``max_steps`` through its
lineage); the speed is the median seconds per step of recent reports times the slots in use. It
assumes every remaining trial trains to its end, so under a policy that stops trials early it is
an upper bound.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from hpctune.analysis.summary import best_phrase, done_count, study_line, total_trials
from hpctune.journal.best import peak_value
from hpctune.journal.entities import TrialRecord
from hpctune.journal.reader import read_study
from hpctune.journal.state import StudyRecord
from hpctune.plugins import PluginError
from hpctune.policies import policy_class
from hpctune.study.formatting import format_duration, format_params, format_value
from hpctune.study.states import StudyState, TrialStatus

LINE_WIDTH = 100  # a completion line fits this many columns
FINAL_STATES = (StudyState.FINISHED, StudyState.STOPPED, StudyState.FAILED)


@dataclass(frozen=True)
class RunningTrial:
    """A trial being trained now."""

    trial_id: int
    step: int
    end: int
    steps_per_s: float  # nan before two reports
    last: float


@dataclass(frozen=True)
class Snapshot:
    """What the progress display shows at one moment."""

    name: str
    state: str
    counts: dict[str, int]
    done: int
    total: int
    best: str
    running: list[RunningTrial]
    steps_done: int
    steps_left: int
    eta_s: float | None
    elapsed_s: float | None
    metric: str

    @property
    def fraction(self) -> float:
        """Share of the work done (0..1)."""
        total = self.steps_done + self.steps_left
        return self.steps_done / total if total else 0.0


def _trial_end(record: StudyRecord, trial: TrialRecord) -> int:
    max_steps = int(record.spec.get("max_steps", 0) or 0)
    return min(trial.end_step or max_steps, max_steps)


def _trained_steps(trial: TrialRecord) -> int:
    return max(trial.step - int(trial.parent_step or 0), 0)


def work_left(record: StudyRecord) -> tuple[int, int]:
    """``(steps trained, steps left)``, assuming every remaining trial trains to its end."""
    max_steps = int(record.spec.get("max_steps", 0) or 0)
    num_trials = int(record.spec.get("num_trials", 0) or 0)
    done = sum(_trained_steps(t) for t in record.trials.values())
    if _forking(record):
        # population based training: each member trains max_steps through its lineage
        return done, max(num_trials * max_steps - done, 0)
    left = sum(
        max(_trial_end(record, t) - t.step, 0)
        for t in record.trials.values()
        if not t.status.is_final
    )
    left += max(num_trials - record.generated, 0) * max_steps
    return done, left


def _forking(record: StudyRecord) -> bool:
    name = str(record.spec.get("policy", {}).get("name", ""))
    try:
        return policy_class(name).traits.makes_configurations
    except PluginError:  # an unknown policy (newer version, gone): not forking, as far as we know
        return False


def seconds_per_step(record: StudyRecord, recent: int = 200) -> float:
    """Median seconds between consecutive reports of the study metric (recent ones), or NaN."""
    gaps: list[tuple[float, float]] = []  # (time of the later report, gap)
    for trial in record.trials.values():
        times, steps = trial.curve_times, trial.curve_steps
        start = max(len(times) - 20, 1)
        for i in range(start, len(times)):
            if steps[i] == steps[i - 1] + 1 and times[i] > times[i - 1]:
                gaps.append((times[i], times[i] - times[i - 1]))
    if not gaps:
        return math.nan
    gaps.sort()
    return float(statistics.median(g for _, g in gaps[-recent:]))


def _speed(trial: TrialRecord) -> float:
    times, steps = trial.curve_times[-6:], trial.curve_steps[-6:]
    if len(times) < 2 or times[-1] <= times[0]:
        return math.nan
    return (steps[-1] - steps[0]) / (times[-1] - times[0])


def snapshot(record: StudyRecord, now: float | None = None) -> Snapshot:
    """Compute what the display shows from the study's state."""
    now = time.time() if now is None else now
    running = [
        RunningTrial(
            t.trial_id,
            t.step,
            _trial_end(record, t),
            _speed(t),
            t.curve_values[-1] if t.curve_values else math.nan,
        )
        for tid, t in sorted(record.trials.items())
        if t.status is TrialStatus.RUNNING
    ]
    done, left = work_left(record)
    per_step = seconds_per_step(record)
    slots = int(record.spec.get("resources", {}).get("slots", 1) or 1)
    in_use = max(min(slots, len(running) or slots), 1)
    eta = left * per_step / in_use if left and math.isfinite(per_step) else None
    if record.state in FINAL_STATES:
        eta = 0.0
    start = record.started_time or record.created_time
    elapsed = None if not start else (record.ended_time or now) - start
    return Snapshot(
        name=str(record.spec.get("name", "")),
        state=record.state.value,
        counts=record.counts(),
        done=done_count(record),
        total=total_trials(record),
        best=best_phrase(record),
        running=running,
        steps_done=done,
        steps_left=left,
        eta_s=eta,
        elapsed_s=elapsed,
        metric=record.metric,
    )


def eta_text(snap: Snapshot) -> str:
    """``ETA 3m10s`` (``ETA -`` before any speed is measured)."""
    return "ETA -" if snap.eta_s is None else f"ETA {format_duration(snap.eta_s)}"


def plain_line(record: StudyRecord, now: float | None = None) -> str:
    """The periodic line for logs and pipes: the study line, the work done and the ETA."""
    snap = snapshot(record, now)
    return f"{study_line(record, now)} | {100 * snap.fraction:.0f}% of steps | {eta_text(snap)}"


def completion_line(record: StudyRecord, trial: TrialRecord, width: int = LINE_WIDTH) -> str:
    """One line (at most ``width`` columns) for a trial that ended: its state, step and value."""
    value, at = peak_value(record, trial)
    end = _trial_end(record, trial)
    text = f"trial {trial.trial_id} {trial.status.value} at step {trial.step}/{end}"
    if trial.missing_rows:
        text += f" with {trial.missing_rows} missing rows"
    if not math.isnan(value):
        last = trial.curve_values[-1]
        text += f": {record.metric} best {format_value(value)} (step {at})"
        if at != trial.curve_steps[-1]:
            text += f", last {format_value(last)}"
    if trial.status is not TrialStatus.COMPLETED:
        why = trial.error.strip().splitlines()[-1] if trial.error.strip() else trial.reason
        if why:
            text += f" - {why}"
    return _cut(text, width)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def render(snap: Snapshot, *, max_running: int = 8) -> Any:
    """The live display as a rich renderable: a header, counts, best, running trials, a bar."""
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    elapsed = "" if snap.elapsed_s is None else f", elapsed {format_duration(snap.elapsed_s)}"
    header = Text.assemble(
        (f"study {snap.name}", "bold"),
        f": {snap.state}, trials {snap.done}/{snap.total} done{elapsed}",
    )
    counts = "  ".join(f"{name} {n}" for name, n in snap.counts.items() if n)
    parts: list[Any] = [header, Text(counts or "no trials yet")]
    parts.append(Text(snap.best or f"no value of {snap.metric} yet"))
    if snap.running:
        table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
        for col in ("trial", "step", "steps/s", f"last {snap.metric}"):
            table.add_column(col, justify="right")
        for r in snap.running[:max_running]:
            speed = "-" if math.isnan(r.steps_per_s) else f"{r.steps_per_s:.3g}"
            table.add_row(str(r.trial_id), f"{r.step}/{r.end}", speed, format_value(r.last))
        parts.append(table)
        if len(snap.running) > max_running:
            parts.append(Text(f"... {len(snap.running) - max_running} more running"))
    bar = Table.grid(padding=(0, 1))
    bar.add_row(
        ProgressBar(total=1.0, completed=snap.fraction, width=40),
        f"{100 * snap.fraction:.0f}% of {snap.steps_done + snap.steps_left} steps",
        eta_text(snap),
    )
    parts.append(bar)
    return Group(*parts)


class LiveProgress:
    """The controller's progress callback: a live display on a terminal (rich), a plain line
    every ``interval`` seconds otherwise, and one completion line per trial that ends.

    Args:
        out: Where to print.
        interval: Seconds between plain lines (default 10; the live display refreshes 2x/s).
        show_params: Print each ended trial's parameters on a second line.
        live: Force the live display on or off (default: when ``out`` is a terminal).
    """

    def __init__(
        self,
        out: TextIO,
        *,
        interval: float | None = None,
        show_params: bool = False,
        live: bool | None = None,
    ) -> None:
        self.out = out
        self.tty = out.isatty() if live is None else live
        self.interval = interval if interval is not None else 10.0
        self.show_params = show_params
        self._last = -math.inf
        self._seen: dict[int, TrialStatus] = {}
        self._warnings = 0
        self._live: Any = None

    def __call__(self, controller: Any) -> None:
        """The controller's per-iteration hook: :meth:`update` with its study record."""
        self.update(controller.state)

    def update(self, record: StudyRecord) -> None:
        """Print the lines of trials that ended and the warnings journaled since the last call,
        and refresh the display."""
        for warning in record.warnings[self._warnings :]:
            self._print(f"warning: {warning.message}")
        self._warnings = len(record.warnings)
        for tid, trial in sorted(record.trials.items()):
            if trial.status.is_final and self._seen.get(tid) is not trial.status:
                self._seen[tid] = trial.status
                self._print(completion_line(record, trial))
                if self.show_params:
                    self._print("  " + format_params(trial.params))
        if record.state in FINAL_STATES:
            self.close()  # the summary that follows prints the final line, once
            return
        if self.tty:
            self._refresh(record)
            return
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            self._print(plain_line(record))

    def _refresh(self, record: StudyRecord) -> None:
        from rich.console import Console
        from rich.live import Live

        if self._live is None:
            console = Console(file=self.out, force_terminal=True)
            self._live = Live(console=console, refresh_per_second=2, transient=True)
            self._live.start()
        self._live.update(render(snapshot(record)))

    def _print(self, text: str) -> None:
        if self._live is not None:
            self._live.console.print(text, highlight=False, markup=False, soft_wrap=True)
        else:
            print(text, file=self.out, flush=True)

    def close(self) -> None:
        """Remove the live display (it is transient) so that what follows prints below it."""
        if self._live is not None:
            self._live.stop()
            self._live = None


def watch(
    directory: str | Path,
    *,
    out: TextIO = sys.stdout,
    interval: float = 2.0,
    load: Callable[[Path], StudyRecord] | None = None,
    max_updates: int | None = None,
) -> StudyRecord:
    """Follow a study from its journal until it ends (``hpctune status --watch``).

    On a terminal the live display; otherwise a plain line every ``interval`` seconds. Returns
    the last state read.
    """

    def read(path: Path) -> StudyRecord:
        return read_study(path).record

    load = load or read
    path = Path(directory)
    progress = LiveProgress(out, interval=0.0)
    updates = 0
    record = load(path)
    progress._seen = {tid: t.status for tid, t in record.trials.items() if t.status.is_final}
    try:
        while True:
            progress.update(record)
            updates += 1
            if record.state in FINAL_STATES or (max_updates and updates >= max_updates):
                break
            time.sleep(interval)
            record = load(path)
    finally:
        progress.close()
    return record


__all__ = [
    "LINE_WIDTH",
    "LiveProgress",
    "RunningTrial",
    "Snapshot",
    "completion_line",
    "plain_line",
    "render",
    "seconds_per_step",
    "snapshot",
    "watch",
    "work_left",
]
