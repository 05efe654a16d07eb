"""Run the example studies, write their reports and screenshot every section in Chromium.

    python benchmarks/example_reports.py [--out DIR] [--only digits ...] [--docs] [--reuse]

Studies: ``jobs/digits``, ``jobs/digits-pbt``, ``jobs/digits-stages`` and ``jobs/charlm`` under
POP (its study.toml with ``[policy] name = "pop"``), each run with ``hpctune launch --local``
(about 8 minutes in all on 2 cores). Each report goes to ``DIR/<study>/report`` and its section
screenshots (headless Chromium, as ``tests/browser.py`` takes them) to ``DIR/<study>/shots``.
``--docs`` copies the screenshots the README shows into ``docs/images/``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.browser import open_report  # noqa: E402

EXAMPLES = {
    "digits": "jobs/digits/study.toml",
    "digits-pbt": "jobs/digits-pbt/study.toml",
    "digits-stages": "jobs/digits-stages/study.toml",
    "charlm-pop": "jobs/charlm/study.toml",  # with [policy] name = "pop", boundary = 6
}
DOCS = {  # screenshot -> docs/images name
    ("digits", "overview"): "report-digits-overview.png",
    ("digits", "importance"): "report-digits-parameters.png",
    ("charlm-pop", "curves"): "report-charlm-pop-curves.png",
}


def spec_for(name: str, out: Path) -> Path:
    """The study.toml to launch (charlm's with POP written next to its copy)."""
    source = REPO / EXAMPLES[name]
    if name != "charlm-pop":
        return source
    text = source.read_text()
    text = re.sub(r'\[policy\]\nname = "default"', '[policy]\nname = "pop"\nboundary = 6', text)
    text = text.replace(
        'entry_point = "train.py:train"', f'entry_point = "{source.parent}/train.py:train"'
    )
    path = out / "charlm-pop.toml"
    path.write_text(text.replace('name = "charlm"', 'name = "charlm-pop"', 1))
    return path


def run(name: str, out: Path, reuse: bool = False) -> Path:
    """Run one example (``reuse``: keep a finished study there), write its report and
    screenshots; return the shots folder."""
    folder = out / name
    cli = [sys.executable, "-m", "hpctune.cli"]
    study = folder / "study"
    if not (reuse and (study / "journal.zarr").exists()):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        spec = spec_for(name, out)
        launch = [*cli, "launch", str(spec), "--local", "--study-dir", str(study)]
        subprocess.run(launch, check=True, stdout=subprocess.DEVNULL)
    shutil.rmtree(folder / "shots", ignore_errors=True)
    subprocess.run([*cli, "report", str(study), "--out", str(folder / "report")], check=True)
    load = open_report(folder / "report" / "index.html", folder / "shots")
    print(f"{name}: sections {sorted(load.sections)}, errors {load.errors}, failed {load.failed}")
    return folder / "shots"


def main(argv: list[str] | None = None) -> int:
    """Run the examples given (default all)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/hpctune-example-reports"))
    parser.add_argument("--only", nargs="*", choices=sorted(EXAMPLES), default=sorted(EXAMPLES))
    parser.add_argument("--docs", action="store_true", help="copy README's screenshots to docs/")
    parser.add_argument("--reuse", action="store_true", help="report the studies already run")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.only:
        shots = run(name, args.out, args.reuse)
        if args.docs:
            for (study, section), target in DOCS.items():
                if study == name:
                    (REPO / "docs" / "images").mkdir(exist_ok=True)
                    shutil.copyfile(shots / f"{section}.png", REPO / "docs" / "images" / target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
