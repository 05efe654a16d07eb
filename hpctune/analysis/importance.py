"""Parameter importance: Optuna's fANOVA evaluator on the study's completed trials.

fANOVA (Hutter et al. 2014) fits a random forest of the trials' values (under ``[study] best``)
on the searched columns (:mod:`hpctune.analysis.params`) and splits the variance of its
prediction into each parameter's share; the shares sum to 1. Needs optuna and scikit-learn
(``pip install 'hpctune[report]'``) and at least :data:`MIN_TRIALS` completed trials. To keep
``hpctune report`` fast on large studies the forest has 16 trees of depth at most 12 (Optuna's
defaults: 64 and 64) and sees at most :data:`MAX_TRIALS` completed trials (a seeded sample);
``benchmarks/report.py --check-importance`` compares the shares with Optuna's defaults on all
trials.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from hpctune.analysis.optuna_trials import in_memory_study
from hpctune.plotting import INSTALL

if TYPE_CHECKING:
    from hpctune.journal.reader import StudyReader

MIN_TRIALS = 4
MAX_TRIALS = 256


def parameter_importance(
    study: StudyReader, *, n_trees: int = 16, max_depth: int = 12, seed: int = 0
) -> dict[str, Any]:
    """``{"method", "trials", "importance": {column: share}}``, or ``{"note": why not}``."""
    try:
        import optuna
        import sklearn  # noqa: F401 - the evaluator's forest
        from optuna.importance import FanovaImportanceEvaluator
        from optuna.trial import TrialState
    except ImportError as exc:
        return {"note": f"parameter importance needs optuna and scikit-learn ({exc}): {INSTALL}"}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    target = in_memory_study(study)
    done = [t for t in target.trials if t.state is TrialState.COMPLETE and t.value is not None]
    done = [t for t in done if math.isfinite(t.value)]  # type: ignore[arg-type]
    if len(done) < MIN_TRIALS:
        return {
            "note": f"it needs at least {MIN_TRIALS} completed trials, and this study has "
            f"{len(done)} (a trial stopped early is not compared with complete ones)"
        }
    if len(done) > MAX_TRIALS:
        picked = np.random.default_rng(seed).choice(len(done), MAX_TRIALS, replace=False)
        done = [done[i] for i in sorted(picked)]
        sample = optuna.create_study(direction=target.direction)
        sample.add_trials(done)
        target = sample
    searched = sorted({name for t in done for name in t.params})
    varying = [n for n in searched if len({repr(t.params.get(n)) for t in done}) > 1]
    if not varying:
        return {"note": "no searched parameter varies among the completed trials"}
    evaluator = FanovaImportanceEvaluator(n_trees=n_trees, max_depth=max_depth, seed=seed)
    shares = optuna.importance.get_param_importances(
        target, evaluator=evaluator, params=varying, normalize=True
    )
    return {
        "method": f"fANOVA (Optuna's FanovaImportanceEvaluator, {n_trees} trees of depth "
        f"<= {max_depth}, seed {seed})",
        "trials": len(done),
        "importance": {k: float(v) for k, v in shares.items()},
    }


__all__ = ["MIN_TRIALS", "parameter_importance"]
