#!/usr/bin/env bash
# The test command of README.md, and what CI runs: install everything from scratch (Python
# packages into .venv, Debian's Slurm and munge packages, Debian's Chromium for the report's
# headless-browser test), start the local Slurm cluster and run the linters and the whole test
# suite (Slurm and slow tests included). Beside the rest of the suite, a second pytest run takes
# the Slurm tests, then switches the cluster to its second configuration (the "site" variant:
# other partitions, no accounting database, SBATCH_EXPORT=NONE) and runs the Slurm tests marked
# `site` against it; stop the cluster.
#
#   tests/run.sh                 everything
#   tests/run.sh -k journal      extra arguments go to pytest (all runs)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
    "$PYTHON" -m venv .venv
fi
# torch first, pinned: the CPU build (an unpinned torch would pull a multi-GB CUDA build). pip
# compiles the bytecode at install: with PYTHONDONTWRITEBYTECODE set (as on this machine), a
# module without it would be compiled again by every process that imports it.
.venv/bin/pip install --quiet --disable-pip-version-check torch==2.13.0
.venv/bin/pip install --quiet --disable-pip-version-check -e ".[dev]"

echo "== Chromium (the report's browser test)"
if ! command -v chromium >/dev/null; then
    # Debian's Chromium, as root, without recommends (Playwright drives it; its own browser
    # download does not work here)
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium \
        >/tmp/hpctune-chromium-apt.log 2>&1; then
        DEBIAN_FRONTEND=noninteractive apt-get update >>/tmp/hpctune-chromium-apt.log 2>&1
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium \
            >>/tmp/hpctune-chromium-apt.log 2>&1 || {
            echo "installing chromium failed; see /tmp/hpctune-chromium-apt.log" >&2
            exit 1
        }
    fi
fi

# The linters run beside the tests (mypy takes half a minute on a fresh clone; lint-imports
# checks the layers of pyproject.toml [tool.importlinter]); their output
# follows the tests', and a finding fails the run as a failed test does.
lint() {
    .venv/bin/ruff check hpctune tests benchmarks jobs &&
        .venv/bin/ruff format --check hpctune tests benchmarks jobs &&
        .venv/bin/lint-imports --no-cache &&
        .venv/bin/mypy hpctune
}
lint_log=$(mktemp /tmp/hpctune-lint.XXXXXX)
lint >"$lint_log" 2>&1 &
lint_pid=$!

echo "== local Slurm cluster (default variant)"
export HPCTUNE_SLURM_VARIANT=default
tests/slurm/cluster.sh up
trap 'HPCTUNE_SLURM_VARIANT=site tests/slurm/cluster.sh down; HPCTUNE_SLURM_VARIANT=default tests/slurm/cluster.sh down' EXIT
eval "$(tests/slurm/cluster.sh env)"

echo "== tests: the Slurm tests and the rest, side by side"
# One BLAS/OpenMP thread per process: three pytest processes share two cores, and pools of two
# threads in each oversubscribe them (a thread waits for its descheduled sibling). Workers get
# their own settings from the executors (cpus_per_worker, ctx.devices); where they use more than
# one thread, waiting threads sleep instead of spinning through CPU-seconds the others need.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
# Two pytest runs at once: the Slurm tests one after another (they share the one cluster; a
# preemptor job would preempt another test's workers), then, on the cluster's second
# configuration (the "site" variant: other partitions, no accounting database,
# SBATCH_EXPORT=NONE), the Slurm tests marked `site`; and beside them the rest on two
# pytest-xdist workers. Each run has its own temporary directory; the Slurm side's output
# follows the other's.
slurm_side() {
    local rc=0 rc_site=0
    .venv/bin/pytest -m slurm --basetemp=/tmp/hpctune-tests-slurm "$@" || rc=$?
    ((rc == 5)) && rc=0 # the extra arguments selected none of them
    echo "== local Slurm cluster (site variant: its own config, no slurmdbd, SBATCH_EXPORT=NONE)"
    export HPCTUNE_SLURM_VARIANT=site
    tests/slurm/cluster.sh up || return 1 # stops the default variant first
    eval "$(tests/slurm/cluster.sh env)"
    echo "== tests marked site, against the site variant"
    .venv/bin/pytest -m "slurm and site" --basetemp=/tmp/hpctune-tests-site tests/slurm "$@" ||
        rc_site=$?
    ((rc_site == 5)) && rc_site=0
    echo "the Slurm tests exited $rc, the site tests $rc_site"
    ((rc == 0 && rc_site == 0))
}
slurm_log=$(mktemp /tmp/hpctune-slurm-tests.XXXXXX)
slurm_side "$@" >"$slurm_log" 2>&1 &
slurm_pid=$!
rc_rest=0
.venv/bin/pytest -m "not slurm" -n 2 --dist worksteal --basetemp=/tmp/hpctune-tests-rest "$@" || rc_rest=$?
rc_slurm=0
wait "$slurm_pid" || rc_slurm=$?
rc_lint=0
wait "$lint_pid" || rc_lint=$?
echo "== the Slurm tests and the site tests (run beside the rest)"
cat "$slurm_log"
rm -f "$slurm_log"
echo "== lint (ruff check, ruff format --check, mypy; run beside the tests)"
cat "$lint_log"
rm -f "$lint_log"
((rc_rest == 5)) && rc_rest=0 # the extra arguments selected none of them
if ((rc_rest != 0 || rc_slurm != 0 || rc_lint != 0)); then
    echo "failed: the rest exited $rc_rest, the Slurm side $rc_slurm, lint $rc_lint" >&2
    exit 1
fi
