"""``python -m hpctune.cli ...``: what the tests and the controller's job script run."""

from __future__ import annotations

import sys

from hpctune.cli import main

sys.exit(main())
