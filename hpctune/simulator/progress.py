"""A progress bar for ``hpctune simulate`` (rich, on standard error, only on a terminal)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


@contextlib.contextmanager
def run_progress(
    total: int, *, console: Console | None = None
) -> Iterator[Callable[[str, int], None]]:
    """A bar over ``total`` simulated runs; yields the ``on_run(label, seed)`` callback.

    Drawn on standard error, and only when it is a terminal (``--json`` output and logs stay
    clean); the bar disappears when the runs are done.
    """
    console = console or Console(stderr=True)
    progress = Progress(
        TextColumn("simulating {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )
    with progress:
        task = progress.add_task("", total=total)

        def on_run(label: str, seed: int) -> None:
            progress.update(task, advance=1, description=f"{label} seed {seed}")

        yield on_run
