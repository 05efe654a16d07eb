"""A progress bar for ``hpctune simulate`` (rich, on standard error, only on a terminal)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console

from hpctune.analysis.progress_bar import progress_bar


@contextlib.contextmanager
def run_progress(
    total: int, *, console: Console | None = None
) -> Iterator[Callable[[str, int], None]]:
    """A bar over ``total`` simulated runs; yields the ``on_run(label, seed)`` callback."""
    with progress_bar(total, "simulating", console=console) as advance:

        def on_run(label: str, seed: int) -> None:
            advance(f"{label} seed {seed}", 1)

        yield on_run
