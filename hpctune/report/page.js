// hpctune study report: builds the interactive plots from DATA (inlined by hpctune report).
// Plotly is loaded from plotly.min.js next to this page; nothing is fetched from the network.
"use strict";

const KNOWN_COLOURS = {
  completed: "#2ca02c", terminated: "#ff7f0e", failed: "#d62728", running: "#1f77b4",
  suspended: "#9467bd", queued: "#7f7f7f",
};
const SPARE_COLOURS = ["#8c564b", "#e377c2", "#17becf", "#bcbd22", "#393b79", "#637939"];
const STAGE_COLOURS = { done: "#2ca02c", running: "#ff7f0e", pending: "#bbbbbb", released: "#d62728" };
const CONFIG = { responsive: true, displaylogo: false };
const ov = DATA.overview;
const metric = ov.metric;
const unit = ov.step_unit;

function stateColour(state) {
  if (state in KNOWN_COLOURS) return KNOWN_COLOURS[state];
  const i = DATA.states.indexOf(state);
  return SPARE_COLOURS[(i < 0 ? 0 : i) % SPARE_COLOURS.length];
}

function layout(extra) {
  return Object.assign({
    margin: { l: 70, r: 20, t: 40, b: 50 }, hovermode: "closest",
    legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom" }, font: { size: 12 },
  }, extra);
}

// The metric axis: log when a loss spans more than a decade, else the range of the values
// (with many values, the worst 2 % cut), so the interesting range is not squashed.
function metricAxis(values, title) {
  const v = values.filter((x) => x !== null && isFinite(x)).sort((a, b) => a - b);
  const axis = { title: { text: title || metric } };
  if (!v.length) return axis;
  if (ov.mode === "min" && v[0] > 0 && v[v.length - 1] / v[0] > 10) {
    axis.type = "log";
    // 1, 2, 5 in each decade, each labelled with its whole value (Plotly's own minor labels
    // read "2" and "5" for 0.2 and 0.5)
    const ticks = [];
    for (let e = Math.floor(Math.log10(v[0])); e <= Math.ceil(Math.log10(v[v.length - 1])); e++) {
      for (const m of [1, 2, 5]) ticks.push(m * 10 ** e);
    }
    axis.tickvals = ticks;
    axis.ticktext = ticks.map((t) => String(+t.toPrecision(1)));
    return axis;
  }
  const q = (p) => v[Math.min(v.length - 1, Math.max(0, Math.floor(p * (v.length - 1))))];
  const cut = v.length >= 1000 ? 0.02 : 0;
  const lo = ov.mode === "max" ? q(cut) : v[0];
  const hi = ov.mode === "max" ? v[v.length - 1] : q(1 - cut);
  const pad = (hi - lo) * 0.05 || Math.abs(hi) * 0.05 || 0.1;
  axis.range = [lo - pad, hi + pad];
  return axis;
}

function plot(id, traces, lay) {
  const el = document.getElementById(id);
  if (el) Plotly.newPlot(el, traces, lay, CONFIG);
}

function bestSoFar() {
  const b = DATA.best_so_far;
  if (!b.values.length) return;
  const hover = b.trials.map((t) => "trial " + t);
  const common = { mode: "lines+markers", line: { shape: "hv" }, text: hover, name: "best so far" };
  plot("plot-best-time", [Object.assign({ x: b.seconds.map((s) => s / 60), y: b.values }, common)],
    layout({ xaxis: { title: { text: "minutes since the study started" } },
      yaxis: metricAxis(b.values, "best " + metric + " reported so far"), showlegend: false }));
  plot("plot-best-hours", [Object.assign({ x: b.hours, y: b.values }, common)],
    layout({ xaxis: { title: { text: b.unit + " allocated" } },
      yaxis: metricAxis(b.values, "best " + metric + " reported so far"), showlegend: false }));
}

function curves() {
  const byState = {};
  const all = [];
  for (const t of DATA.trials) {
    if (!t.steps.length) continue;
    const g = byState[t.status] || (byState[t.status] = { x: [], y: [], text: [] });
    for (let i = 0; i < t.steps.length; i++) {
      g.x.push(t.steps[i]); g.y.push(t.values[i]); g.text.push("trial " + t.id);
      all.push(t.values[i]);
    }
    g.x.push(null); g.y.push(null); g.text.push("");
  }
  const big = DATA.trials.length > 200;
  const traces = Object.keys(byState).map((s) => ({
    x: byState[s].x, y: byState[s].y, text: byState[s].text, name: s,
    type: big ? "scattergl" : "scatter", mode: "lines",
    line: { color: stateColour(s), width: 1 }, opacity: 0.7,
    hovertemplate: "%{text}<br>" + unit + " %{x}<br>" + metric + " %{y}<extra>" + s + "</extra>",
  }));
  const top = ov.best || ov.best_reported;
  const best = top ? DATA.trials.find((t) => t.id === top.trial) : null;
  if (best) {
    const label = (ov.best ? "best trial " : "best reported (" + best.status + ") trial ") + best.id;
    traces.push({ x: best.steps, y: best.values, mode: "lines", type: "scatter", name: label,
      line: { color: "black", width: 2.5, dash: ov.best ? "solid" : "dash" },
      hovertemplate: label + "<br>" + unit + " %{x}<br>" + metric + " %{y}<extra></extra>" });
  }
  // the curve model's latest prediction: the 3 best trials' shown, the others one click away
  (DATA.predictions || []).forEach((p, i) => {
    const shown = i < 3;
    const group = shown ? "pred" : "pred-more";
    const x = p.steps.concat(p.steps.slice().reverse());
    const y = p.high.concat(p.low.slice().reverse());
    traces.push({ x, y, fill: "toself", fillcolor: "rgba(31,119,180,0.12)", line: { width: 0 },
      mode: "lines", hoverinfo: "skip", legendgroup: group, showlegend: false, type: "scatter",
      visible: shown ? true : "legendonly" });
    traces.push({ x: p.steps, y: p.median, mode: "lines", legendgroup: group, type: "scatter",
      line: { dash: "dot", color: "#1f77b4", width: 1.5 }, visible: shown ? true : "legendonly",
      showlegend: i === 0 || i === 3,
      name: shown ? "curve model: latest prediction, median and 90% band (3 best trials)"
        : "predictions of the other trials",
      hovertemplate: "trial " + p.trial + " predicted from " + p.n + " points<br>%{y}<extra></extra>" });
  });
  plot("plot-curves", traces, layout({ xaxis: { title: { text: unit } },
    yaxis: metricAxis(all), height: 480, showlegend: true }));
}

function pools() {
  const p = DATA.pools;
  if (!p) return;
  const minutes = p.seconds.map((s) => s / 60);
  plot("plot-pools", [
    { x: minutes, y: p.promising_slots, name: "promising pool (slots)", stackgroup: "s",
      line: { shape: "hv", color: "#2ca02c" } },
    { x: minutes, y: p.promising_slots.map((s) => p.slots - s), name: "opportunistic pool (slots)",
      stackgroup: "s", line: { shape: "hv", color: "#ff7f0e" } },
    { x: minutes, y: p.promising_trials, name: "promising trials", mode: "lines",
      line: { shape: "hv", dash: "dot", color: "#333" } },
  ], layout({ xaxis: { title: { text: "minutes since the study started" } },
    yaxis: { title: { text: "slots (of " + p.slots + ")" }, rangemode: "tozero" } }));
}

function lineage() {
  const L = DATA.lineage;
  if (!L) return;
  const byId = {};
  for (const t of DATA.trials) byId[t.id] = t;
  const onChain = new Set(L.schedule.map((s) => s.trial));
  const thin = { x: [], y: [], text: [] };
  const thick = { x: [], y: [], text: [] };
  const all = [];
  for (const t of DATA.trials) {
    if (!t.steps.length) continue;
    const g = onChain.has(t.id) ? thick : thin;
    const xs = t.steps.slice(), ys = t.values.slice();
    const parent = byId[t.parent];
    if (parent && t.parent_step !== null) {
      const i = parent.steps.indexOf(t.parent_step);
      if (i >= 0) { xs.unshift(t.parent_step); ys.unshift(parent.values[i]); }
    }
    for (let i = 0; i < xs.length; i++) {
      g.x.push(xs[i]); g.y.push(ys[i]); g.text.push("trial " + t.id + " (gen " + t.generation + ")");
      all.push(ys[i]);
    }
    g.x.push(null); g.y.push(null); g.text.push("");
  }
  plot("plot-lineage", [
    Object.assign({ mode: "lines", name: "population", line: { color: "#1f77b4", width: 1 },
      opacity: 0.45, hovertemplate: "%{text}<br>%{y}<extra></extra>" }, thin),
    Object.assign({ mode: "lines+markers", name: "lineage of the best trial " + L.best,
      line: { color: "black", width: 2.5 }, marker: { size: 4 },
      hovertemplate: "%{text}<br>%{y}<extra></extra>" }, thick),
  ], layout({ xaxis: { title: { text: unit }, range: [0, ov.max_steps] }, yaxis: metricAxis(all),
    height: 420 }));
  const names = [];
  for (const s of L.schedule) for (const k in s.params) if (!names.includes(k)) names.push(k);
  const changing = names.filter((n) => new Set(L.schedule.map((s) => JSON.stringify(s.params[n]))).size > 1);
  const traces = changing.map((n, i) => {
    const x = [], y = [];
    for (const s of L.schedule) { x.push(s.start, s.end); y.push(s.params[n], s.params[n]); }
    return { x, y, name: n, mode: "lines", line: { width: 2.5 }, yaxis: i ? "y" + (i + 1) : "y" };
  });
  if (!traces.length) return;
  const lay = layout({ xaxis: { title: { text: unit }, range: [0, ov.max_steps] },
    height: 140 + 130 * traces.length, grid: { rows: traces.length, columns: 1, pattern: "coupled" } });
  changing.forEach((n, i) => {
    const vals = traces[i].y.filter((v) => typeof v === "number");
    const positive = vals.length && vals.every((v) => v > 0) && Math.max(...vals) / Math.min(...vals) > 5;
    lay["yaxis" + (i ? i + 1 : "")] = { title: { text: n }, type: positive ? "log" : "linear" };
  });
  plot("plot-schedule", traces, lay);
}

function stages() {
  const S = DATA.stages;
  if (!S) return;
  const traces = [];
  for (const status of Object.keys(STAGE_COLOURS)) {
    const g = { x: [], y: [], text: [] };
    for (const s of S.stages) {
      if (s.status !== status) continue;
      g.x.push(s.start, s.end, null); g.y.push(s.row, s.row, null);
      const label = "stage " + s.id + " (" + unit + "s " + s.start + "-" + s.end + ", " + s.served +
        " trials)<br>" + (s.label || "(continued)") + (s.value !== null ? "<br>" + metric + " " + s.value : "");
      g.text.push(label, label, "");
    }
    if (g.x.length) traces.push(Object.assign({ mode: "lines", name: status,
      line: { color: STAGE_COLOURS[status], width: 7 }, hovertemplate: "%{text}<extra></extra>" }, g));
  }
  const links = { x: [], y: [] };
  const byId = {};
  for (const s of S.stages) byId[s.id] = s;
  for (const s of S.stages) if (s.parent !== null) {
    links.x.push(s.start, s.start, null); links.y.push(byId[s.parent].row, s.row, null);
  }
  traces.unshift(Object.assign({ mode: "lines", line: { color: "#999", width: 1 },
    hoverinfo: "skip", showlegend: false }, links));
  const leaves = S.stages.filter((s) => s.value !== null && s.trials.length);
  traces.push({ x: leaves.map((s) => s.end), y: leaves.map((s) => s.row), mode: "text",
    text: leaves.map((s) => " " + Number(s.value).toPrecision(4)), textposition: "middle right", showlegend: false,
    hoverinfo: "skip", textfont: { size: 10 } });
  const rows = Math.max(...S.stages.map((s) => s.row)) + 1;
  plot("plot-stages", traces, layout({ height: Math.max(300, 60 + 16 * rows),
    xaxis: { title: { text: unit }, range: [0, ov.max_steps * 1.12] },
    yaxis: { autorange: "reversed", showticklabels: false, zeroline: false, showgrid: false } }));
}

function importance() {
  const I = DATA.importance;
  if (!I || !I.importance) return;
  const names = Object.keys(I.importance).reverse();
  plot("plot-importance", [{ type: "bar", orientation: "h", x: names.map((n) => I.importance[n]),
    y: names, marker: { color: "#1f77b4" }, hovertemplate: "%{y}: %{x:.3f}<extra></extra>" }],
  layout({ height: 80 + 28 * names.length, margin: { l: 140, r: 20, t: 20, b: 50 },
    xaxis: { title: { text: "share of the variance of " + metric + " (fANOVA)" }, range: [0, 1] } }));
}

function valued() {
  return DATA.trials.filter((t) => t.value !== null);
}

function parallel() {
  const trials = valued();
  if (trials.length < 2 || !DATA.dimensions.length) return;
  const dims = DATA.dimensions.map((d, i) => {
    const raw = trials.map((t) => t.dims[i]);
    if (d.kind === "categorical") {
      const cats = d.choices.filter((c) => raw.map(String).includes(c));
      return { label: d.name, values: raw.map((v) => cats.indexOf(String(v))),
        tickvals: cats.map((_, j) => j), ticktext: cats.map((c) => c.length > 24 ? c.slice(0, 22) + "…" : c) };
    }
    if (d.log && raw.every((v) => v === null || v > 0)) {
      const lo = Math.log10(d.low), hi = Math.log10(d.high);
      const ticks = [];
      for (let e = Math.floor(lo); e <= Math.ceil(hi); e++) {
        for (const m of hi - lo > 3 ? [1] : [1, 2, 5]) {
          const t = Math.log10(m) + e;
          if (t >= lo - 1e-9 && t <= hi + 1e-9) ticks.push(t);
        }
      }
      return { label: d.name + " (log)", values: raw.map((v) => v === null ? null : Math.log10(v)),
        range: [lo, hi], tickvals: ticks, ticktext: ticks.map((t) => Number(Math.pow(10, t).toPrecision(2)).toString()) };
    }
    return { label: d.name, values: raw, range: [d.low, d.high] };
  });
  const values = trials.map((t) => t.value);
  dims.push({ label: metric, values });
  plot("plot-parallel", [{ type: "parcoords", dimensions: dims,
    line: { color: values, colorscale: "Viridis", reversescale: ov.mode === "min", showscale: true,
      colorbar: { title: { text: metric } } } }],
  layout({ height: 440, margin: { l: 80, r: 80, t: 60, b: 30 } }));
}

function slices() {
  const box = document.getElementById("slices-grid");
  if (!box) return;
  const trials = valued();
  DATA.dimensions.forEach((d, i) => {
    const div = document.createElement("div");
    div.className = "slice";
    div.id = "plot-slice-" + i;
    box.appendChild(div);
    const x = trials.map((t) => d.kind === "categorical" ? String(t.dims[i]) : t.dims[i]);
    const xaxis = { title: { text: d.name } };
    if (d.kind === "categorical") {
      xaxis.type = "category";
      xaxis.categoryorder = "array";
      xaxis.categoryarray = d.choices;
    }
    else if (d.log) xaxis.type = "log";
    plot(div.id, [{ x, y: trials.map((t) => t.value), mode: "markers", type: "scatter",
      text: trials.map((t) => "trial " + t.id + " (" + t.status + ")"),
      marker: { color: trials.map((t) => stateColour(t.status)), size: 7, opacity: 0.8 },
      hovertemplate: "%{text}<br>" + d.name + " %{x}<br>" + metric + " %{y}<extra></extra>" }],
    layout({ height: 300, xaxis, yaxis: metricAxis(trials.map((t) => t.value)), showlegend: false,
      margin: { l: 60, r: 10, t: 10, b: 50 } }));
  });
}

bestSoFar();
curves();
pools();
lineage();
stages();
importance();
parallel();
slices();
document.body.dataset.rendered = "yes";
