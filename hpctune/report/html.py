"""``hpctune report``: one folder with a static HTML page, its plotting library and PNGs.

The folder holds ``index.html`` (the text of every section rendered here, the data inlined as
JSON, the interactive plots drawn in the browser by ``page.js``), ``plotly.min.js`` (copied from
the ``plotly`` package: no CDN, no network) and one PNG per plot for terminals and e-mails. Copy
the folder anywhere and open ``index.html`` from disk; it works on a study still running (the
report is of the journal's last commit).
"""

from __future__ import annotations

import html
import json
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpctune.errors import UsageError
from hpctune.files import atomic_path
from hpctune.plotting import INSTALL
from hpctune.report.data import report_data
from hpctune.report.pngs import write_pngs

if TYPE_CHECKING:
    from hpctune.journal.reader import StudyReader

SECTIONS = (
    ("overview", "At a glance"),
    ("progress", "Best so far"),
    ("curves", "Learning curves"),
    ("pools", "POP's pools"),
    ("lineage", "PBT lineage"),
    ("stages", "Stage tree"),
    ("importance", "Parameters"),
    ("slices", "Slices"),
    ("failures", "Failures"),
    ("trials", "Trials"),
)


def plotly_js() -> Path:
    """The ``plotly.min.js`` that the ``plotly`` package ships.

    Raises:
        UsageError: plotly is not installed (exit 2 with the pip command).
    """
    try:
        import plotly
    except ImportError:
        raise UsageError(
            f"hpctune report needs plotly, which is not installed: {INSTALL}"
        ) from None
    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise UsageError(f"{path} is missing from the plotly package; reinstall it: {INSTALL}")
    return path


def _e(value: Any) -> str:
    return html.escape(str(value))


def _overview(data: dict[str, Any]) -> str:
    ov = data["overview"]
    cards = [
        ("state", ov["state"]),
        ("trials", " ".join(f"{n} {s}" for s, n in ov["counts"].items() if n) or "none"),
        (f"{ov['hours_unit']} allocated", "-" if ov["hours"] is None else f"{ov['hours']:.3g}"),
        (
            "share spent training",
            "-" if ov["training_share"] is None else f"{100 * ov['training_share']:.0f}%",
        ),
        ("elapsed", ov["elapsed"] or "-"),
    ]
    best = ov["best"]
    if best is not None:
        cards.insert(1, (f"best {ov['metric']} ({ov['mode']})", best["value"]))
        cards.insert(2, ("time to the best value", best["time_to_best"] or "-"))
    parts = ['<div class="cards">']
    for key, value in cards:
        parts.append(
            f'<div class="card"><div class="k">{_e(key)}</div>'
            f'<div class="v">{_e(value)}</div></div>'
        )
    parts.append("</div>")
    parts.append(f'<p class="note">{_e(ov["line"])}</p>')
    if ov["reason"]:
        parts.append(f'<p class="note">reason: {_e(ov["reason"])}</p>')
    block: list[str] = []  # indented lines (a PBT schedule) go in one <pre>
    for line in [*ov["policy_lines"], ""]:
        if line.startswith("  "):
            block.append(line.strip())
            continue
        if block:
            parts.append(f"<pre>{_e(chr(10).join(block))}</pre>")
            block = []
        if line:
            parts.append(f'<p class="note">{_e(line)}</p>')
    rule = "its best step" if ov["best_rule"] == "peak" else "its last step"
    if best is None:
        ended = ov["state"] in ("finished", "stopped", "failed")
        text = (
            "No trial completed: every trial ended otherwise (see Failures)"
            if ended
            else "No trial has completed yet"
        )
        text += "; only a completed trial can be the best."
        seen = ov["best_reported"]
        if seen is not None:
            text += (
                f" The best value reported was {seen['value']} by trial {seen['trial']} at "
                f"{ov['step_unit']} {seen['step']} ({seen['status']})."
            )
        parts.append(f'<p class="note">{_e(text)}</p>')
    else:
        rows = "".join(
            f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in best["params"].items()
        )
        lineage = (
            " Its parameters are those of its last session; the schedule above trained it."
            if data["lineage"] is not None
            else ""
        )
        parts.append(
            f"<h3>Best trial: {best['trial']}</h3>"
            f'<p class="note">{_e(ov["metric"])} = {best["value"]} at {_e(ov["step_unit"])} '
            f'{best["step"]} ({rule}; <code>[study] best = "{_e(ov["best_rule"])}"</code>). '
            f"Only completed trials count.{lineage}</p>"
            f"<table><tr><th>parameter</th><th>value</th></tr>{rows}</table>"
        )
        if best["checkpoint"]:
            parts.append(
                '<p class="note">Its model (the checkpoint saved at that step) and how to load '
                "it; <code>hpctune best</code> prints the configuration as TOML:</p>"
                f"<pre>import torch\nstate = torch.load({json.dumps(best['checkpoint'])}, "
                "weights_only=True)\n# the object your training function passed to "
                "ctx.save_checkpoint()</pre>"
            )
        else:
            parts.append(
                f'<p class="note">No checkpoint was kept at {_e(ov["step_unit"])} {best["step"]}: '
                "save one after every report and keep <code>[study] keep_checkpoints = "
                '"best_and_last"</code>.</p>'
            )
    parts.append(
        f'<p class="note">Study directory <code>{_e(ov["directory"])}</code>; policy '
        f"<b>{_e(ov['policy'])}</b>, generator <b>{_e(ov['generator'])}</b>, "
        f"{_e(ov['max_steps'])} {_e(ov['step_unit'])}s per trial.</p>"
    )
    return "".join(parts)


def _failures(data: dict[str, Any]) -> str:
    rows = data["failures"]
    if not rows:
        return '<p class="note">Every trial that ended completed.</p>'
    body = "".join(
        f"<tr><td>{f['trial']}</td><td>{_e(f['status'])}</td><td>{f['step']}</td>"
        f"<td>{_e(f['reason'])}</td><td>{_e(f['error'])}</td></tr>"
        for f in rows
    )
    return (
        '<p class="note">Trials that ended without completing (failed first): terminated by the '
        "policy, diverged, stopped by the user, or failed with an error.</p>"
        '<div class="scroll"><table><tr><th>trial</th><th>state</th><th>step</th><th>reason</th>'
        f"<th>error (last line)</th></tr>{body}</table></div>"
    )


def _trials(data: dict[str, Any]) -> str:
    metric = data["overview"]["metric"]
    body = "".join(
        f"<tr><td>{t['id']}</td><td>{_e(t['status'])}</td><td>{t['step']}</td>"
        f"<td>{'-' if t['value'] is None else t['value']}</td>"
        f"<td>{'-' if t['peak'] is None else t['peak']}</td>"
        f'<td class="params">{_e(t["params"])}</td></tr>'
        for t in data["trials"]
    )
    return (
        '<div class="scroll"><table><tr><th>trial</th><th>state</th><th>steps</th>'
        f"<th>value ({_e(data['overview']['best_rule'])})</th><th>best {_e(metric)}</th>"
        f"<th>parameters</th></tr>{body}</table></div>"
    )


def _section_body(key: str, data: dict[str, Any], pngs: dict[str, str]) -> str | None:
    ov = data["overview"]
    png = (
        f'<p class="png">Static image: <a href="{pngs[key]}">{pngs[key]}</a></p>'
        if key in pngs
        else ""
    )
    if key == "overview":
        return _overview(data)
    if key == "progress":
        if not data["best_so_far"]["values"]:
            return '<p class="note">No value of the study metric reported yet.</p>'
        return (
            f'<p class="note">The best {_e(ov["metric"])} reported by any trial so far, against '
            f"wall-clock time and against the {data['best_so_far']['unit']} the workers held.</p>"
            '<div class="two"><div id="plot-best-time" class="plot"></div>'
            f'<div id="plot-best-hours" class="plot"></div></div>{png}'
        )
    if key == "curves":
        pred = (
            " Dotted: the curve model's latest prediction (median and 90% band) of the 3 best "
            "trials the policy asked fits for (the others: click them on in the legend). Black: "
            "the best trial."
            if data["predictions"]
            else ""
        )
        return (
            f'<p class="note">Every trial\'s {_e(ov["metric"])} by {_e(ov["step_unit"])}, '
            "coloured by the state it ended in (click a state in the legend to hide it)."
            f"{pred}</p>"
            f'<div id="plot-curves" class="plot"></div>{png}'
        )
    if key == "pools":
        if data["pools"] is None:
            return None
        return (
            '<p class="note">POP splits the slots into a promising pool (trials likely to reach '
            "the target, trained without interruption) and an opportunistic pool (the others, "
            "sharing slots in turns); the dotted line counts the promising trials.</p>"
            f'<div id="plot-pools" class="plot"></div>{png}'
        )
    if key == "lineage":
        lineage = data["lineage"]
        if lineage is None:
            return None
        return (
            f'<p class="note">The population over {lineage["generations"]} generations: each '
            "trial joined to the trial it was forked from; black, the lineage of the best trial. "
            "Below, the schedule it found: each changing parameter along that lineage.</p>"
            '<div id="plot-lineage" class="plot"></div><div id="plot-schedule" class="plot"></div>'
            f"{png}"
        )
    if key == "stages":
        stages = data["stages"]
        if stages is None:
            return None
        trained, requested = stages["trained"], stages["requested"]
        saved = requested - trained
        counts = ", ".join(f"{n} {s}" for s, n in stages["counts"].items() if n)
        return (
            f'<p class="note">{len(stages["stages"])} stages ({_e(counts)}). Shared prefixes '
            f"trained once: {trained} {_e(ov['step_unit'])}s trained for the {requested} the "
            f"trials reached ({saved} saved). Each bar is a stage over its steps; hover for its "
            f"parameters and trials; the numbers are the {_e(ov['metric'])} at the leaves.</p>"
            f'<div id="plot-stages" class="plot"></div>{png}'
        )
    if key == "importance":
        imp = data["importance"]
        head = ""
        if imp is None or "importance" not in imp:
            note = "" if imp is None else imp.get("note", "")
            head = f'<p class="note">Parameter importance: {_e(note or "not computed")}.</p>'
        else:
            head = (
                f'<p class="note">How much of the variation of {_e(ov["metric"])} across the '
                f"{imp['trials']} completed trials each searched parameter explains: "
                f"{_e(imp['method'])}.</p>"
                '<div id="plot-importance" class="plot"></div>'
            )
        return (
            head + '<p class="note">Parallel coordinates: one line per trial with a value, '
            "coloured by it; drag along an axis to select a range.</p>"
            f'<div id="plot-parallel" class="plot"></div>{png}'
        )
    if key == "slices":
        if not data["dimensions"]:
            return '<p class="note">No searched parameter.</p>'
        return (
            f'<p class="note">{_e(ov["metric"])} (each trial\'s value under [study] best) against '
            "each searched parameter, coloured by the trial's state.</p>"
            f'<div id="slices-grid"></div>{png}'
        )
    if key == "failures":
        return _failures(data)
    if key == "trials":
        return _trials(data)
    return None  # pragma: no cover - every section is listed above


def render_page(data: dict[str, Any], pngs: dict[str, str]) -> str:
    """The page's HTML (its style and plotting code inlined)."""
    here = Path(__file__).parent
    css, script = (here / "page.css").read_text(), (here / "page.js").read_text()
    ov = data["overview"]
    sections, links = [], []
    for key, title in SECTIONS:
        body = _section_body(key, data, pngs)
        if body is None:
            continue
        links.append(f'<a href="#{key}">{_e(title)}</a>')
        sections.append(f'<section id="{key}"><h2>{_e(title)}</h2>{body}</section>')
    payload = json.dumps(data, allow_nan=False).replace("</", "<\\/")
    made = time.strftime("%Y-%m-%d %H:%M", time.localtime())
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>hpctune report: {_e(ov['name'])}</title><style>{css}</style>"
        '<script src="plotly.min.js"></script></head><body>'
        f'<header><h1>Study {_e(ov["name"])}</h1><div class="sub">{_e(ov["metric"])} '
        f"({_e(ov['mode'])}), policy {_e(ov['policy'])} &middot; {_e(ov['state'])} &middot; "
        f"report of {made} (the journal's last commit)</div></header>"
        f"<nav>{''.join(links)}</nav>{''.join(sections)}"
        f"<script>const DATA = {payload};</script><script>{script}</script></body></html>"
    )


def write_report(study: StudyReader, out: Path, *, pngs: bool = True) -> Path:
    """Write the report folder ``out`` (built under a temporary name, then renamed); return
    the path of its ``index.html``."""
    library = plotly_js()
    data = report_data(study)
    out = Path(out)
    with atomic_path(out) as tmp:
        tmp.mkdir(parents=True)
        shutil.copyfile(library, tmp / "plotly.min.js")
        images = write_pngs(study, data, tmp) if pngs else {}
        (tmp / "index.html").write_text(render_page(data, images))
        (tmp / "report.json").write_text(json.dumps(data, allow_nan=False))
    return out / "index.html"


__all__ = ["SECTIONS", "plotly_js", "render_page", "write_report"]
