"""Open a study report in a real headless Chromium (Debian's, driven by Playwright) and take
screenshots of its sections; what the page logged as errors and what it could not load."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
# what Chromium needs on a machine with no network but the package registries
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@dataclass
class PageLoad:
    """What happened when the page loaded."""

    errors: list[str] = field(default_factory=list)  # console errors and page exceptions
    failed: list[str] = field(default_factory=list)  # requests that failed (missing files)
    requested: list[str] = field(default_factory=list)  # every URL the page asked for
    sections: dict[str, Path] = field(default_factory=dict)  # section id -> screenshot
    plots: dict[str, int] = field(default_factory=dict)  # section id -> rendered Plotly plots


def chromium() -> str:
    """The Chromium binary (tests/run.sh installs Debian's ``chromium``)."""
    path = shutil.which("chromium") or CHROMIUM
    if not Path(path).exists():
        raise AssertionError(
            "Chromium is missing: tests/run.sh installs it (apt-get install chromium)"
        )
    return path


def open_report(index: Path, shots: Path, width: int = 1300) -> PageLoad:
    """Load ``index`` from file://, wait until its plots are drawn, screenshot each section."""
    from playwright.sync_api import sync_playwright

    shots.mkdir(parents=True, exist_ok=True)
    load = PageLoad()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": 900})
            page.on("console", lambda m: load.errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: load.errors.append(str(e)))
            page.on("requestfailed", lambda r: load.failed.append(r.url))
            page.on("request", lambda r: load.requested.append(r.url))
            page.goto(index.resolve().as_uri())
            page.wait_for_selector("body[data-rendered=yes]", timeout=120_000)
            for section in page.query_selector_all("section"):
                sid = str(section.get_attribute("id"))
                path = shots / f"{sid}.png"
                section.screenshot(path=str(path))
                load.sections[sid] = path
                load.plots[sid] = len(section.query_selector_all(".js-plotly-plot"))
        finally:
            browser.close()
    return load
