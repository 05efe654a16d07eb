#!/usr/bin/env bash
# The test command of README.md, and what CI runs: install everything from scratch (Python
# packages into .venv, Debian's Slurm and munge packages), start the local Slurm cluster, run the
# linters and the whole test suite (Slurm and slow tests included), stop the cluster. Debian's
# Chromium is installed too (the report's headless-browser test).
#
#   tests/run.sh                 everything
#   tests/run.sh -k journal      extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
    "$PYTHON" -m venv .venv
fi
# torch first, pinned: the CPU build (an unpinned torch would pull a multi-GB CUDA build)
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

echo "== lint"
.venv/bin/ruff check hpctune tests benchmarks jobs
.venv/bin/ruff format --check hpctune tests benchmarks jobs
.venv/bin/mypy hpctune

echo "== local Slurm cluster"
tests/slurm/cluster.sh up
trap 'tests/slurm/cluster.sh down' EXIT
eval "$(tests/slurm/cluster.sh env)"

echo "== tests"
.venv/bin/pytest "$@"
