// Charts of the run page, drawn as plain SVG (no library): validation reward per domain across the
// stages, and the step-time breakdown per phase. Pure functions of the API's JSON; no fetching here.
"use strict";

const Charts = (() => {
  const SVG = "http://www.w3.org/2000/svg";
  const DOMAIN_COLORS = {
    math: "#4e79a7", code: "#e15759", if: "#59a14f", mcqa: "#f28e2b", structured: "#b07aa1",
    tool: "#9c755f", rlhf: "#ff9da7", long_context: "#76b7b2", swe: "#edc948",
  };
  const SPARE_COLORS = ["#17becf", "#bcbd22", "#8c564b", "#7f7f7f"];
  const PHASE_COLORS = { generate: "#6baed6", score: "#fd8d3c", teacher: "#9e9ac8", train: "#74c476", sync: "#969696" };

  function domainColor(domain, i) {
    return DOMAIN_COLORS[domain] || SPARE_COLORS[i % SPARE_COLORS.length];
  }

  function el(name, attrs, parent, text) {
    const node = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }

  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function ticks(lo, hi, n) {
    const out = [];
    for (let i = 0; i <= n; i++) out.push(lo + ((hi - lo) * i) / n);
    return out;
  }

  function fmt(v) {
    const a = Math.abs(v);
    return a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : v.toFixed(2);
  }

  // A frame: svg of the container's width, scales for x in [0, xMax] and y in [yLo, yHi].
  function frame(container, height, xMax, yLo, yHi, margin) {
    container.textContent = "";
    const width = Math.max(480, container.clientWidth || 900);
    const svg = el("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img" }, container);
    const plotW = width - margin.l - margin.r, plotH = height - margin.t - margin.b;
    const x = (v) => margin.l + (plotW * v) / (xMax || 1);
    const y = (v) => margin.t + plotH - (plotH * (v - yLo)) / (yHi - yLo || 1);
    return { svg, width, height, plotW, plotH, x, y, margin };
  }

  function yAxis(f, lo, hi, n, unit) {
    const g = el("g", { class: "grid" }, f.svg);
    for (const t of ticks(lo, hi, n)) {
      el("line", { x1: f.margin.l, x2: f.margin.l + f.plotW, y1: f.y(t), y2: f.y(t) }, g);
      el("text", { x: f.margin.l - 5, y: f.y(t) + 4, "text-anchor": "end" }, g, fmt(t));
    }
    if (unit) el("text", { x: 4, y: f.margin.t - 8 }, g, unit);
  }

  // Shaded bands, dashed boundaries and names of the stages laid out as [start, end] on the x axis.
  function stageMarks(f, spans) {
    const g = el("g", {}, f.svg);
    spans.forEach((s, i) => {
      const x0 = f.x(s.start), x1 = f.x(s.end);
      if (i % 2 === 1 && x1 > x0) el("rect", { class: "band", x: x0, y: f.margin.t, width: x1 - x0, height: f.plotH }, g);
    });
    spans.forEach((s, i) => {
      const x0 = f.x(s.start), x1 = f.x(s.end);
      if (i > 0) el("line", { class: "boundary", x1: x0, x2: x0, y1: f.margin.t - 4, y2: f.margin.t + f.plotH }, g);
      const room = x1 - x0;
      if (room <= 0) return;
      const label = room >= s.name.length * 6.2 + 4 ? s.name : room >= 14 ? String(s.index + 1) : "";
      const t = el("text", { class: "stage-label", x: (x0 + x1) / 2, y: f.margin.t - 6, "text-anchor": "middle" }, g, label);
      el("title", {}, t, `${s.index + 1}. ${s.name} (${s.type})`);
    });
  }

  function legend(f, rows) {
    const g = el("g", { class: "legend" }, f.svg);
    const x = f.width - f.margin.r + 14;
    rows.forEach((r, i) => {
      const y = f.margin.t + 6 + i * 18;
      if (r.line) {
        el("line", { x1: x, x2: x + 18, y1: y, y2: y, stroke: r.color, "stroke-width": 3 }, g);
        el("circle", { cx: x + 9, cy: y, r: 3.5, fill: r.color }, g);
      } else {
        el("rect", { x, y: y - 6, width: 14, height: 12, fill: r.color }, g);
      }
      el("text", { x: x + 24, y: y + 4 }, g, r.label);
    });
  }

  // Solid runs of a domain's points, and thin dotted joins across policy stages that did not evaluate it
  // (so a line never pretends to know the reward where nobody measured it).
  function segments(points, stages) {
    const skipped = (a, b) => stages.some((s) => s.index > a.stage_index && s.index < b.stage_index && s.end > s.start);
    const out = [];
    let run = [];
    points.forEach((p, i) => {
      if (i > 0 && skipped(points[i - 1], p)) {
        out.push({ gap: false, points: run }, { gap: true, points: [points[i - 1], p] });
        run = [];
      }
      run.push(p);
    });
    if (run.length) out.push({ gap: false, points: run });
    return out;
  }

  // Step numbers under the stage boundaries, leaving out any too close to the previous one.
  function xTicks(f, values) {
    let last = -Infinity;
    for (const v of [...new Set(values)].sort((a, b) => a - b)) {
      if (f.x(v) - last < 26) continue;
      el("text", { x: f.x(v), y: f.margin.t + f.plotH + 14, "text-anchor": "middle" }, f.svg, String(v));
      last = f.x(v);
    }
  }

  // evals: RunEvals JSON. One polyline per domain over the policy-step axis, stage boundaries marked.
  function rewardChart(container, evals) {
    const points = evals.domains.flatMap((d) => d.points);
    const xMax = Math.max(1, ...evals.stages.map((s) => s.end), ...points.map((p) => p.x));
    const scores = points.map((p) => p.score);
    const lo = Math.min(0, ...scores), hi = Math.max(1, ...scores);
    const f = frame(container, 300, xMax, lo, hi, { l: 40, r: 170, t: 24, b: 22 });
    stageMarks(f, evals.stages);
    yAxis(f, lo, hi, 4, "reward");
    xTicks(f, [0, xMax, ...evals.stages.map((s) => s.start)]);
    el("text", { x: f.width - f.margin.r + 14, y: f.margin.t + f.plotH + 14 }, f.svg, "policy step");
    if (!points.length) {
      el("text", { x: f.margin.l + f.plotW / 2, y: f.margin.t + f.plotH / 2, "text-anchor": "middle" }, f.svg,
        "no evaluation recorded yet");
    }
    const rows = [];
    evals.domains.forEach((d, i) => {
      const color = domainColor(d.domain, i);
      const g = el("g", { class: "domain", "data-domain": d.domain }, f.svg);
      for (const seg of segments(d.points, evals.stages)) {
        el("polyline", {
          points: seg.points.map((p) => `${f.x(p.x)},${f.y(p.score)}`).join(" "),
          fill: "none", stroke: color, "stroke-width": seg.gap ? 1.5 : 2.5, "stroke-linejoin": "round",
          "stroke-dasharray": seg.gap ? "2 4" : "none", class: seg.gap ? "gap" : "curve",
        }, g);
      }
      for (const p of d.points) {
        const c = el("circle", { cx: f.x(p.x), cy: f.y(p.score), r: 3.5, fill: color }, g);
        el("title", {}, c, `${d.domain} · ${p.stage_name} step ${p.step_index < 0 ? "start" : p.step_index + 1}: ` +
          `${p.score.toFixed(3)} (n=${p.n}, weights v${p.weight_version})`);
      }
      const last = d.points[d.points.length - 1];
      rows.push({ color, line: true, label: `${d.domain}  ${last ? last.score.toFixed(2) : ""}` });
    });
    legend(f, rows);
  }

  // metrics: RunMetrics JSON. One stacked bar per step (all stages, in order), one colour per phase group.
  function timingChart(container, metrics) {
    const groups = metrics.phase_groups;
    const steps = [], spans = [];
    metrics.stages.forEach((s) => {
      spans.push({ index: s.index, name: s.name, type: s.type, start: steps.length, end: steps.length + s.steps.length });
      steps.push(...s.steps);
    });
    const totals = steps.map((st) => groups.reduce((a, g) => a + (st.phase_seconds[g] || 0), 0));
    const yMax = niceMax(Math.max(0, ...totals));
    const f = frame(container, 190, Math.max(1, steps.length), 0, yMax, { l: 40, r: 170, t: 22, b: 14 });
    stageMarks(f, spans);
    yAxis(f, 0, yMax, 2, "seconds");
    const g = el("g", { class: "bars" }, f.svg);
    const w = Math.max(1, f.plotW / Math.max(1, steps.length) - 1);
    steps.forEach((st, i) => {
      let base = 0;
      for (const grp of groups) {
        const v = st.phase_seconds[grp] || 0;
        if (v <= 0) continue;
        const r = el("rect", { x: f.x(i) + 0.5, y: f.y(base + v), width: w, height: f.y(base) - f.y(base + v),
          fill: PHASE_COLORS[grp] || "#ccc" }, g);
        el("title", {}, r, `stage ${st.stage_index + 1} step ${st.step_index + 1} · ${grp}: ${v.toFixed(2)} s`);
        base += v;
      }
    });
    const sum = Object.fromEntries(groups.map((grp) => [grp, steps.reduce((a, st) => a + (st.phase_seconds[grp] || 0), 0)]));
    const all = Object.values(sum).reduce((a, b) => a + b, 0) || 1;
    legend(f, groups.map((grp) => ({ color: PHASE_COLORS[grp] || "#ccc",
      label: `${grp}  ${fmt(sum[grp])} s (${Math.round((100 * sum[grp]) / all)}%)` })));
  }

  return { rewardChart, timingChart, domainColor, DOMAIN_COLORS, PHASE_COLORS, fmt };
})();
