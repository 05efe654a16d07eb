"""Stage trees (Hippo): trials' hyperparameter sequences cut into stages, shared prefixes once.

- :mod:`~hpctune.stagetree.pieces`: stage identity (canonical pieces of schedules).
- :mod:`~hpctune.stagetree.plan`: the search plan (nodes, requests, reference counts, JSON).
- :mod:`~hpctune.stagetree.tree`: stage trees from the plan (Algorithm 1).
- :mod:`~hpctune.stagetree.schedulers`: critical path, BFS, most-children-first.
- :mod:`~hpctune.stagetree.makespan`: makespan of a stage tree on W workers.
- :mod:`~hpctune.stagetree.preview`: ``hpctune plan`` figures and text.
- :mod:`~hpctune.stagetree.store`: the stage store shared by studies (files).

All pure but :mod:`.store`: nothing else here reads files, clocks or Slurm.
"""

from __future__ import annotations

from hpctune.stagetree.makespan import Simulation, simulate, trial_makespan
from hpctune.stagetree.pieces import ConfigPiece, Piece, TrialStage, trial_stages
from hpctune.stagetree.plan import PlanError, PlanNode, Request, RequestStatus, SearchPlan
from hpctune.stagetree.schedulers import Scheduler, critical_path_batches, pick
from hpctune.stagetree.tree import Point, Stage, StageTree, build_stage_tree

__all__ = [
    "ConfigPiece",
    "Piece",
    "PlanError",
    "PlanNode",
    "Point",
    "Request",
    "RequestStatus",
    "Scheduler",
    "SearchPlan",
    "Simulation",
    "Stage",
    "StageTree",
    "TrialStage",
    "build_stage_tree",
    "critical_path_batches",
    "pick",
    "simulate",
    "trial_makespan",
    "trial_stages",
]
