"""Elastic, cost-minimal allocation under a deadline (RubberBand, Misra et al., EuroSys 2021).

Pure planning code: the experiment's stages (:mod:`.experiment`), the workload's profile
(:mod:`.profile`), the cost model (:mod:`.cost`), allocations and their fair shapes
(:mod:`.allocation`), the execution DAG (:mod:`.dag`), its sampling simulator
(:mod:`.simulate`) and the planner (:mod:`.planner`). Measuring a profile is in
:mod:`.profiling`; the commands are ``hpctune profile`` and ``hpctune plan-elastic``.
"""

from hpctune.elastic.allocation import Allocation, StageShape
from hpctune.elastic.cost import CostModel
from hpctune.elastic.dag import Dag, Node, NodeKind, critical_path, finish_times, to_dag
from hpctune.elastic.experiment import (
    ExperimentSpec,
    PlanningError,
    Progress,
    Stage,
    experiment_from_study,
)
from hpctune.elastic.planner import Plan, PlanOptions, PlanResult, plan_elastic
from hpctune.elastic.predict import Prediction, Spread, simulate
from hpctune.elastic.profile import Profile

__all__ = [
    "Allocation",
    "CostModel",
    "Dag",
    "ExperimentSpec",
    "Node",
    "NodeKind",
    "Plan",
    "PlanOptions",
    "PlanResult",
    "PlanningError",
    "Prediction",
    "Profile",
    "Progress",
    "Spread",
    "Stage",
    "StageShape",
    "critical_path",
    "experiment_from_study",
    "finish_times",
    "plan_elastic",
    "simulate",
    "to_dag",
]
