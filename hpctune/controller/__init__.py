"""The controller of a study directory: the scheduling core (:mod:`hpctune.core`) on the
study's files (:mod:`.wire`), its lease and the real clock; :mod:`.launch` creates studies and
runs their controllers locally or in a Slurm job.
"""

from __future__ import annotations

from hpctune.controller.directory import Controller
from hpctune.wire.lease import controller_alive

__all__ = ["Controller", "controller_alive"]
