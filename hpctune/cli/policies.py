"""``check-policy``: a policy (hpctune's own or another package's) checked against the policy
contract by the conformance kit (:mod:`hpctune.testing`)."""

from __future__ import annotations

import json
import shlex
from typing import Any

import click

from hpctune.cli.common import EXIT_FAILURE, EXIT_OK
from hpctune.errors import UsageError


@click.command("check-policy")
@click.argument("target")
@click.option(
    "--options",
    "options_text",
    default="{}",
    metavar="JSON",
    help="The policy's options as a JSON object, e.g. '{\"reduction_factor\": 3}'.",
)
@click.option(
    "--views",
    type=click.IntRange(min=1),
    default=200,
    show_default=True,
    help="Decisions to check (a view and an event each).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="The first study's seed.")
@click.option(
    "--space",
    "space_text",
    default=None,
    metavar="JSON",
    help="The studies' search space as a JSON [search_space] table (default: the kit's).",
)
def check_policy_command(
    target: str, options_text: str, views: int, seed: int, space_text: str | None
) -> int:
    """Check a policy against the policy contract on random studies (the conformance kit).

    TARGET is a registered policy (asha) or MODULE:CLASS_OR_FACTORY (a Policy subclass, or a
    function returning a policy, called with the options as keyword arguments). Checked at every
    decision: no exception, no I/O, no clock, the view left alone, a JSON state that round-trips,
    determinism, restart from the journaled state equals no restart, no more placements than
    free slots, only legal actions. Exit 0 if it passes, 1 with the failing check, 2 for a bad
    argument.
    """
    from hpctune.policies import OptionError
    from hpctune.study.space import parse_space
    from hpctune.testing import ConformanceError, check_policy
    from hpctune.testing.policy_conformance import policy_factory

    options = _json_option("--options", options_text)
    if not isinstance(options, dict):
        raise UsageError(f"--options must be a JSON object, not {options_text!r}")
    space = None
    if space_text is not None:
        space = parse_space(_json_option("--space", space_text), path=None)
    make = policy_factory(target, options)
    try:
        report = check_policy(make, seed=seed, n_views=views, space=space)
    except OptionError as exc:
        raise UsageError(f"{target} refuses the search space: {exc}") from exc
    except ConformanceError as exc:
        again = ["hpctune", "check-policy", target, "--seed", str(exc.seed)]
        again += ["--views", str(exc.views)]
        if options:
            again += ["--options", options_text]
        if space_text is not None:
            again += ["--space", space_text]
        click.echo(f"FAILED: {exc.headline}")
        click.echo(f"reproduce: {shlex.join(again)}")
        return EXIT_FAILURE
    click.echo(report.summary())
    return EXIT_OK


def _json_option(option: str, text: str) -> Any:
    """The JSON value of ``option`` (exit 2 naming it when it does not parse)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{option} {text!r} is not JSON: {exc}") from exc


COMMANDS = [check_policy_command]
