"""A progress bar for long work from the command line (simulations, curve fits).

Drawn with rich on standard error, and only when it is a terminal (``--json`` output and logs
stay clean); the bar disappears when the work is done.
"""

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
def progress_bar(
    total: int, verb: str, *, console: Console | None = None
) -> Iterator[Callable[[str, int], None]]:
    """A bar over ``total`` pieces of work; yields ``advance(description, done)``, to call
    after each ``done`` pieces (the description names the last of them)."""
    console = console or Console(stderr=True)
    progress = Progress(
        TextColumn(verb + " {task.description}"),
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

        def advance(description: str, done: int) -> None:
            progress.update(task, advance=done, description=description)

        yield advance


@contextlib.contextmanager
def run_progress(
    total: int, *, console: Console | None = None
) -> Iterator[Callable[[str, int], None]]:
    """A bar over ``total`` simulated runs; yields the ``on_run(label, seed)`` callback."""
    with progress_bar(total, "simulating", console=console) as advance:

        def on_run(label: str, seed: int) -> None:
            advance(f"{label} seed {seed}", 1)

        yield on_run
