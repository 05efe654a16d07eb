"""Choosing a backend for a command: ``--local``, ``--backend NAME``, or the cluster's."""

from __future__ import annotations

from hpctune.backends.base import Backend
from hpctune.errors import UsageError
from hpctune.plugins import backend, backend_names


def choose_backend(name: str | None = None, *, local: bool = False) -> tuple[Backend, str]:
    """The backend a command runs a study on, and a note for the user ("" if none).

    ``local``: the local backend. ``name``: that backend (a registered name or an importable
    ``MODULE:CLASS``; refused when it cannot be used from here). Neither: the first cluster
    backend that is available here (Slurm when ``sbatch`` is on PATH), else the local one.

    Raises:
        UsageError: ``local`` and another ``name`` together, or ``name`` unavailable here.
        PluginError: ``name`` is unknown or fails to load.
    """
    if local and name not in (None, "local"):
        raise UsageError(f"--local and --backend {name} contradict each other; give one")
    if local:
        return backend("local"), ""
    if name is not None:
        chosen = backend(name)
        if not chosen.available():
            raise UsageError(
                f"the {chosen.name} backend cannot be used from here (its commands are not on "
                "PATH); run on a machine of its cluster, or use --local"
            )
        return chosen, ""
    for candidate in backend_names():
        found = backend(candidate)
        if found.cluster and found.available():
            return found, ""
    return backend("local"), "no cluster backend is available here (sbatch is not on PATH)"


__all__ = ["choose_backend"]
