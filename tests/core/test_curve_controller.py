"""Learning-curve fits in the controller (local executor, real pool): predictions reach the
journal, the view and the policy without anyone waiting for a fit; a restart picks them up."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hpctune.api import open_study
from hpctune.backends.local import local_executor
from hpctune.cli import main
from hpctune.controller import Controller
from hpctune.controller.launch import create_study
from hpctune.curves import Budget, FitOptions
from hpctune.curves.service import read_result
from hpctune.journal.store import JournalReader
from hpctune.policies import (
    Action,
    DefaultPolicy,
    Event,
    EventKind,
    PolicyDecision,
    StudyContext,
    StudyView,
)
from hpctune.spec import StudySpec, load_spec, study_context
from hpctune.study.states import StudyState, TrialStatus
from hpctune.wire.layout import StudyPaths
from tests.conftest import write_study

pytestmark = pytest.mark.timeout(120)

# a = 0 reports a constant: a degenerate curve whose prediction is unknown
TRAIN = """
import os
import time

def train(ctx):
    a = ctx.params["a"]
    for step in range(ctx.start_step + 1, ctx.max_steps + 1):
        time.sleep(ctx.params["sleep"])
        while os.path.exists(ctx.params["gate"]):  # the test holds the trials here
            time.sleep(0.05)
        while step == ctx.max_steps and os.path.exists(f"{ctx.params['gate']}-{ctx.trial_id}"):
            time.sleep(0.05)  # and here, a trial before its last step
        value = 0.3 if a == 0 else 0.9 - 0.6 * step ** -a
        ctx.report(step=step, score=value)
"""


class PredictingPolicy(DefaultPolicy):
    """Default, but it wants predictions and decides at boundaries (workers wait for that)."""

    traits = dataclasses.replace(
        DefaultPolicy.traits, wants_predictions=True, boundary_decisions=True
    )

    def __init__(self, context: StudyContext) -> None:
        super().__init__(context)
        self.seen: list[tuple[int, int, int, TrialStatus, bool]] = []

    def decide(self, view: StudyView, event: Event, rng: np.random.Generator) -> PolicyDecision:
        if event.kind is EventKind.PREDICTION:
            assert event.trial_id is not None
            assert event.step is not None
            prediction = view.predictions[event.trial_id]
            trial = view.trials[event.trial_id]
            self.seen.append(
                (event.trial_id, event.step, prediction.n, trial.status, prediction.unknown)
            )
            return PolicyDecision()
        if event.kind is EventKind.BOUNDARY:
            return PolicyDecision.of([Action.continue_(event.trial_id)])  # type: ignore[arg-type]
        return super().decide(view, event, rng)


def _study(
    tmp_path: Path,
    a: list[float],
    max_steps: int,
    sleep: float,
    model: str = "domhan",
    curves: str = "",
) -> StudyPaths:
    """A study of ``TRAIN``; its trials wait before each step while ``tmp_path/gate`` exists."""
    spec = write_study(
        tmp_path,
        train=TRAIN,
        space={"a": a, "sleep": sleep, "gate": str(tmp_path / "gate")},
        generator={"name": "grid"},
        resources={"slots": 2},
        max_steps=max_steps,
        num_trials=len(a),
    )
    # Domhan's MCMC takes ~0.5 s a fit: long enough to see that nobody waits for one
    spec.write_text(spec.read_text() + f'\n[curves]\nworkers = 2\nmodel = "{model}"\n{curves}')
    return create_study(load_spec(spec))


def _controller(paths: StudyPaths, **kwargs: Any) -> Controller:
    policy = PredictingPolicy(
        study_context(StudySpec.from_dict(open_study(paths.root).record.spec))
    )
    return Controller(
        paths.root, lambda spec: local_executor(paths, spec), policy=policy, **kwargs
    )


def _key(record: tuple[int, dict[str, Any]]) -> tuple[int, int]:
    """A prediction record's trial and number of points."""
    return record[0], int(record[1]["n"])


def _prediction_records(paths: StudyPaths) -> list[tuple[int, dict[str, Any]]]:
    log = JournalReader(paths.journal).table("log")
    return [
        (int(trial), json.loads(data))
        for kind, trial, data in zip(log["kind"], log["trial"], log["data"], strict=True)
        if kind == "prediction"
    ]


def test_predictions_reach_journal_view_and_policy_while_nobody_waits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = _study(tmp_path, [0.0, 0.5, 1.0, 1.5], max_steps=12, sleep=0.25)
    # each trial waits before its last step until a prediction of it is journaled, so that
    # every trial has one however slowly the fits run on a loaded machine
    held = {t: tmp_path / f"gate-{t}" for t in range(4)}
    for gate in held.values():
        gate.touch()
    # per controller iteration: the fits in flight and the reports ingested so far
    seen: list[tuple[frozenset[tuple[int, int]], int]] = []

    def progress(c: Controller) -> None:
        service = c.curves.service
        running = service.running.items() if service is not None else ()
        reports = sum(len(t.curve_steps) for t in c.state.trials.values())
        seen.append((frozenset((t, job.n) for t, job in running), reports))
        for trial_id in c.state.predictions:  # journaled in this iteration's commit
            held[trial_id].unlink(missing_ok=True)

    controller = _controller(paths, on_progress=progress)
    try:
        assert controller.run() is StudyState.FINISHED
    finally:
        controller.core.executor.close()
    study = open_study(paths.root)
    assert all(t.status is TrialStatus.COMPLETED for t in study.trials)
    constant = next(t.trial_id for t in study.trials if t.params["a"] == 0.0)

    # the journal: a `prediction` record per finished fit, the fold keeps each trial's latest
    records = _prediction_records(paths)
    assert {t for t, _ in records} == {t.trial_id for t in study.trials}
    for trial_id, ref in study.record.predictions.items():
        mine = [d for t, d in records if t == trial_id]
        assert ref.n == mine[-1]["n"]
        assert 3 <= ref.n < 12
        assert [d["n"] for d in mine] == sorted({d["n"] for d in mine})  # newer curves only
        loaded = read_result(paths.root / ref.path)
        assert loaded is not None
        prediction, meta = loaded
        assert (prediction.n, meta["trial"], meta["y_sha256"]) == (ref.n, trial_id, ref.y_sha256)
        assert prediction.unknown is (trial_id == constant) is ref.unknown
        if trial_id == constant:
            assert ref.median is None
            assert "constant curve" in prediction.reason
        else:
            assert ref.median is not None
            assert 0.0 < ref.median < 1.0
            assert ref.median == pytest.approx(float(prediction.median[-1]))
        # the controller's view holds the same prediction
        assert controller.core.curves.predictions[trial_id].to_dict() == prediction.to_dict()

    # the policy got PREDICTION events with the prediction already in its view, also while
    # the trial still ran (fits run beside training)
    policy = controller.core.policy
    assert isinstance(policy, PredictingPolicy)
    assert all(step == n for _, step, n, _, _ in policy.seen)
    assert any(status is TrialStatus.RUNNING for _, _, _, status, _ in policy.seen)
    assert any(unknown for trial, *_, unknown in policy.seen if trial == constant)

    # nobody waited for a fit: while a fit ran, the controller went on ingesting reports
    # (counted, not timed; that training goes on while fits are in flight is checked on the
    # simulated clock by tests/core/test_controller_faults.py, with no wall-clock bound)
    fits = {fit for running, _ in seen for fit in running}
    assert fits, "no fit was ever in flight at the end of an iteration"
    ingested_meanwhile = {
        fit: max(n for running, n in seen if fit in running)
        - min(n for running, n in seen if fit in running)
        for fit in fits
    }
    assert max(ingested_meanwhile.values()) >= 1, ingested_meanwhile

    # fit-curves on the study reproduces a fit of the controller (same seed, same n)
    trial_id = next(t.trial_id for t in study.trials if t.params["a"] == 1.0)
    ref = study.record.predictions[trial_id]
    argv = ["fit-curves", str(paths.root), "--trial", str(trial_id), "--at-epoch", str(ref.n)]
    argv += ["--model", "domhan"]
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["trial"], row["n"], row["x_max"]) == (trial_id, ref.n, 12)
    assert row["median"] == pytest.approx(ref.median, abs=2e-6)


def _drive(controller: Controller, until: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, "timed out"
        if controller.step():
            return
        time.sleep(controller.core.settings.poll_interval)


def test_a_restarted_controller_reloads_predictions_and_resubmits_fits_in_flight(
    tmp_path: Path,
) -> None:
    paths = _study(tmp_path, [0.5, 1.0], max_steps=16, sleep=0.3)
    options = FitOptions(
        model="domhan", budget=Budget(nwalkers=24, nsamples=100, burn_in=50), n_keep=64
    )  # small: the fits asked again must end before the trials do, also on a loaded machine
    # no trial ends before the second controller has fitted again (however loaded the
    # machine): each waits before its last step until the test lets it
    held = [tmp_path / f"gate-{t}" for t in range(2)]
    for path in held:
        path.touch()
    first = _controller(paths, curve_options=options)
    first.start()
    service = first.core.curves.service
    assert service is not None
    gate = tmp_path / "gate"
    try:
        _drive(first, lambda: bool(_prediction_records(paths)) and bool(service.running), 60)
        gate.touch()  # the trials wait until the fits asked again are journaled, however slow
    finally:  # "kill" it: its fits in flight never reach the journal
        service.close()
        first.core.executor.close()
    journaled = {(t, d["n"]) for t, d in _prediction_records(paths)}
    for path in (paths.root / "curves").glob("*.json"):
        meta = read_result(path)
        assert meta is not None
        if (meta[1]["trial"], meta[1]["n"]) not in journaled:
            path.unlink()

    record = open_study(paths.root).record
    second = _controller(paths, curve_options=options)
    second.start()
    try:
        # the latest journaled predictions are back in the view
        assert second.core.curves.predictions.keys() == record.predictions.keys()
        for trial_id, ref in record.predictions.items():
            assert second.core.curves.predictions[trial_id].n == ref.n
        # and each running trial's last boundary without a prediction is asked for again
        expected = {}
        for trial in record.trials.values():
            n = len(trial.curve_values)
            ref = record.predictions.get(trial.trial_id)
            if not trial.status.is_final and n >= 3 and (ref is None or ref.n != n):
                expected[trial.trial_id] = n
        assert second.core.curves.service is not None
        asked = {**second.core.curves.service.pending, **second.core.curves.service.running}
        assert {t: job.n for t, job in asked.items()} == expected
        assert expected  # the first controller was stopped with a fit in flight

        def fitted_again() -> bool:
            """Each trial asked again has a new prediction (of a later step if a report that
            was on its way when the first controller stopped came in since)."""
            new = set(map(_key, _prediction_records(paths))) - journaled
            return all(any(t == trial and m >= n for trial, m in new) for t, n in expected.items())

        _drive(second, fitted_again, 90)
        for path in (gate, *held):
            path.unlink()
        _drive(second, lambda: False, 90)
    finally:
        second.core.curves.close()
        second.core.executor.close()
    assert second.core.state.state is StudyState.FINISHED
    records = [(t, d["n"]) for t, d in _prediction_records(paths)]
    assert len(records) == len(set(records))  # no fit journaled twice across the restart
    assert set(records) > journaled


def test_the_amortised_model_is_the_default_and_its_predictions_reach_the_journal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = _study(tmp_path, [0.0, 1.0], max_steps=8, sleep=0.05, model="amortised")
    controller = _controller(paths)
    try:
        assert controller.run() is StudyState.FINISHED
    finally:
        controller.core.executor.close()
    study = open_study(paths.root)
    assert study.spec["curves"]["model"] == "amortised"
    records = _prediction_records(paths)
    assert {t for t, _ in records} == {t.trial_id for t in study.trials}
    # fitted in the controller's process in the iteration that asked: every boundary from 3
    # points to 7 has its prediction (a pool drops waiting requests a newer one replaces)
    for trial in study.trials:
        mine = [d for t, d in records if t == trial.trial_id]
        assert [d["n"] for d in mine] == [3, 4, 5, 6, 7]
        assert {d["backend"] for d in mine} == {"inline"}
    learning = next(t.trial_id for t in study.trials if t.params["a"] == 1.0)
    ref = study.record.predictions[learning]
    assert not ref.unknown
    # 0.9 - 0.6 / step: the prediction of step 8 lies between the last value and the asymptote
    last = 0.9 - 0.6 / ref.n
    assert last - 0.05 < ref.median < 0.95
    # fit-curves with its default model gives the same prediction
    argv = ["fit-curves", str(paths.root), "--trial", str(learning), "--at-epoch", str(ref.n)]
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["median"] == pytest.approx(ref.median, abs=2e-6)


def test_recalibrated_predictions_reach_the_policy_and_a_new_controller_rebuilds_their_pits(
    tmp_path: Path,
) -> None:
    paths = _study(
        tmp_path,
        [0.5, 1.0, 1.5, 2.0],
        max_steps=8,
        sleep=0.05,
        model="amortised",
        curves='recalibrate = "full"\n',
    )
    first = _controller(paths)
    try:
        assert first.run() is StudyState.FINISHED
    finally:
        first.core.curves.close()
        first.core.executor.close()
    calibration = first.core.curves.calibration
    assert calibration is not None
    assert calibration.open_trials == []  # every trial ended at max_steps
    # each trial's predictions from 3 to 7 points lent a PIT at its value at step 8
    assert [calibration.pit_count(n) for n in range(3, 8)] == [4] * 5
    pits = {n: calibration.mapping(n).pits for n in range(3, 8)}
    # the journal has the model's predictions; the policy got recalibrated ones once trials
    # had ended (two slots: the last two trials start after the first two ended)
    record = open_study(paths.root).record
    assert all(len(refs) == 5 for refs in record.prediction_history.values())
    differ = []
    for trial_id, ref in record.predictions.items():
        loaded = read_result(paths.root / ref.path)
        assert loaded is not None
        given = first.core.curves.predictions[trial_id]
        differ.append(not np.array_equal(given.u_quantiles, loaded[0].u_quantiles))
    assert any(differ)

    second = _controller(paths)
    try:
        second.core.curves.start()  # reads every journaled prediction's result file
        rebuilt = second.core.curves.calibration
        assert rebuilt is not None
        assert {n: rebuilt.mapping(n).pits for n in range(3, 8)} == pits
    finally:
        second.core.curves.close()
        second.core.executor.close()
