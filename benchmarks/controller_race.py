"""Two controllers on one study, repeated: how many go on committing, and what the journal holds.

Runs the races of ``tests/faults/races.py`` (real ``hpctune`` processes on a real study of 4
trials x 10 steps) ``--repetitions`` times each and prints, per race: repetitions, repetitions
that ended with exactly one committing controller, controllers refused and fenced, late commits
of a fenced controller into its own (unread) journal directory, duplicate metric rows,
unreadable journals, and studies that did not complete every trial with every row.

    python benchmarks/controller_race.py                      # the local races, 20 times each
    python benchmarks/controller_race.py --races sigstop --lease-timeout 2
    flock /tmp/hpctune-slurm.lock bash -c 'tests/slurm/cluster.sh up && \\
        eval "$(tests/slurm/cluster.sh env)" && \\
        python benchmarks/controller_race.py --races slurm_requeue; tests/slurm/cluster.sh down'

``--lease-timeout`` sets ``HPCTUNE_LEASE_TIMEOUT`` (default: the built-in 30 s): the ``sigstop``
race waits that long before it resumes, since the stopped controller's heartbeat must be older
than it (on this host the pid decides whatever the age, so the outcome does not depend on it).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.faults import races  # noqa: E402

RACES = ("resume_resume", "sigstop", "sigstop_force", "slurm_requeue")
LOCAL = ("resume_resume", "sigstop", "sigstop_force")


def run_once(race: str, folder: Path, repetition: int, lease_timeout: float | None) -> Any:
    """Run one repetition of ``race`` in ``folder``."""
    if race == "resume_resume":
        return races.resume_resume(folder)
    if race == "sigstop":
        return races.sigstop(folder, lease_timeout)
    if race == "sigstop_force":
        return races.sigstop(folder, 1.0 if lease_timeout is None else lease_timeout, force=True)
    return races.slurm_requeue(folder, f"race{repetition}{int(time.time()) % 100000}")


def summarise(race: str, outcomes: list[Any], seconds: float) -> dict[str, Any]:
    """The figures of one race over its repetitions."""
    return {
        "race": race,
        "repetitions": len(outcomes),
        "one_committing_controller": sum(o.committing == 1 for o in outcomes),
        "max_committing_controllers": max((o.committing for o in outcomes), default=0),
        "refused": sum(o.refused for o in outcomes),
        "fenced": sum(o.fenced for o in outcomes),
        "late_commits_into_fenced_journal": sum(o.stray_commits for o in outcomes),
        "duplicate_rows": sum(o.duplicate_rows for o in outcomes),
        "unreadable_journals": sum(o.unreadable for o in outcomes),
        "incomplete_studies": sum(
            o.completed != races.NUM_TRIALS or o.valid_rows != races.NUM_TRIALS * races.MAX_STEPS
            for o in outcomes
        ),
        "seconds_per_repetition": seconds / max(len(outcomes), 1),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the races and print their figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=20)
    parser.add_argument("--races", default=",".join(LOCAL), help=f"of {', '.join(RACES)}")
    parser.add_argument("--lease-timeout", type=float, default=None)
    parser.add_argument("--json", action="store_true", help="print one JSON list")
    parser.add_argument("--keep", action="store_true", help="keep the study directories")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.races.split(",") if n.strip()]
    unknown = sorted(set(names) - set(RACES))
    if unknown:
        parser.error(f"unknown races {unknown}; choose from {', '.join(RACES)}")
    rows = []
    for race in names:
        outcomes = []
        start = time.monotonic()
        for repetition in range(args.repetitions):
            folder = Path(tempfile.mkdtemp(prefix=f"hpctune-race-{race}-"))
            outcome = run_once(race, folder, repetition, args.lease_timeout)
            outcomes.append(outcome)
            if not outcome.ok:
                print(f"[{race} {repetition}] NOT OK ({folder}):\n{outcome.explain()}", flush=True)
            elif not args.keep:
                shutil.rmtree(folder, ignore_errors=True)
            if not args.json:
                print(
                    f"[{race} {repetition + 1}/{args.repetitions}] committing "
                    f"{outcome.committing}, refused {outcome.refused}, fenced {outcome.fenced}, "
                    f"late commits {outcome.stray_commits}, duplicates {outcome.duplicate_rows}",
                    flush=True,
                )
        rows.append(summarise(race, outcomes, time.monotonic() - start))
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    header = [
        ("race", "race"),
        ("repetitions", "reps"),
        ("one_committing_controller", "one committing"),
        ("max_committing_controllers", "max committing"),
        ("refused", "refused"),
        ("fenced", "fenced"),
        ("late_commits_into_fenced_journal", "late commits (unread)"),
        ("duplicate_rows", "duplicate rows"),
        ("unreadable_journals", "unreadable journals"),
        ("incomplete_studies", "incomplete studies"),
        ("seconds_per_repetition", "s/rep"),
    ]
    table = [[label for _, label in header]]
    for row in rows:
        table.append(
            [f"{row[k]:.0f}" if isinstance(row[k], float) else str(row[k]) for k, _ in header]
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
