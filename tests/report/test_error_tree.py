"""Every error a user can act on is an HpctuneError: the CLI prints it on one line and exits 2
for bad input (also for a policy's options, a grid, a schedule or a search plan)."""

from __future__ import annotations

import pytest

from hpctune.cli import main
from hpctune.errors import HpctuneError
from hpctune.policies import OptionError, make_policy
from hpctune.stagetree.plan import PlanError, SearchPlan
from hpctune.study.schedules import ScheduleArgError
from hpctune.study.space import NoGridError, parse_space
from tests.policies._views import context


@pytest.mark.parametrize("error", [OptionError, NoGridError, ScheduleArgError, PlanError])
def test_input_errors_are_hpctune_errors_with_exit_code_2(error: type[Exception]) -> None:
    assert issubclass(error, HpctuneError)
    assert issubclass(error, ValueError)  # callers that caught ValueError still do
    assert error.exit_code == 2  # type: ignore[attr-defined]


def test_raised_ones_carry_their_message() -> None:
    with pytest.raises(HpctuneError, match="reduction_factor"):
        make_policy("asha", {"reduction_factor": 1}, context())
    with pytest.raises(HpctuneError, match="grid"):
        parse_space({"lr": {"type": "float", "low": 0.1, "high": 1.0}}, path=None).grid()
    with pytest.raises(HpctuneError):
        SearchPlan.from_dict({"nodes": "not a list"})


def test_the_cli_prints_an_option_error_on_one_line_and_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["check-policy", "asha", "--options", '{"reduction_factor": 1}'])
    err = capsys.readouterr().err
    assert code == 2
    assert "reduction_factor" in err
    assert "Traceback" not in err
