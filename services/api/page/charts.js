// Charts of the run page, drawn as plain SVG (no library): validation reward per domain across the
// stages, the step-time breakdown per phase, and per-step series (multi-turn episode figures, the
// train/inference mismatch). Pure functions of the API's JSON; no fetching here.
//
// The x axis gives every stage a segment of its own (as the PNG report does): SFT's hundreds of steps
// and an RL stage's dozen each take one segment, and a stage's steps spread over its segment. Domains
// scored by a reward model (or anything outside 0..1) get a panel and a y scale of their own, so the
// 0..1 domains keep theirs. Each MOPD teacher is ringed on the curve it was chosen from.
"use strict";

const Charts = (() => {
  const SVG = "http://www.w3.org/2000/svg";
  const DOMAIN_COLORS = {
    math: "#4e79a7", code: "#e15759", if: "#59a14f", mcqa: "#f28e2b", structured: "#b07aa1",
    tool: "#9c755f", rlhf: "#ff9da7", long_context: "#76b7b2", swe: "#edc948",
  };
  const SPARE_COLORS = ["#17becf", "#bcbd22", "#8c564b", "#7f7f7f"];
  const PHASE_COLORS = { generate: "#6baed6", score: "#fd8d3c", teacher: "#9e9ac8", train: "#74c476", sync: "#969696" };
  const MARGIN = { l: 46, r: 190, t: 12, b: 34 };

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

  // [lo, hi] widened to whole steps of 1, 2, 2.5 or 5 x 10^k, about n of them: {lo, hi, n}.
  function niceRange(lo, hi, n) {
    const step = niceMax((hi - lo) / n || 1);
    const a = Math.floor(lo / step + 1e-9) * step, b = Math.ceil(hi / step - 1e-9) * step;
    return { lo: a, hi: b, n: Math.max(1, Math.round((b - a) / step)) };
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

  // Figures that may be tiny (a log-prob gap of 1e-5): three significant digits, 0 as "0".
  function small(v) {
    if (v === 0) return "0";
    const a = Math.abs(v);
    return a >= 100 ? v.toFixed(0) : a >= 0.01 ? v.toPrecision(3) : v.toExponential(2);
  }

  // An axis tick (a multiple of 1, 2, 2.5 or 5 x 10^k): as short as it can be, "5e-7" rather than "5.00e-7".
  function tick(v) {
    return v !== 0 && Math.abs(v) < 0.01 ? Number(v.toExponential(2)).toExponential() : fmt(v);
  }

  // stages: [{index, name, type, steps}] -> x of (stage, step k) in stage units: stage i spans [i, i + 1];
  // the baseline (k = -1) sits at i, step k at i + (k + 1) / steps.
  function stageX(stages) {
    return (stageIndex, stepIndex) => {
      const steps = Math.max(1, (stages[stageIndex] || {}).steps || 1);
      return stageIndex + Math.min(1, Math.max(0, (stepIndex + 1) / steps));
    };
  }

  // A frame appended to `parent`: an svg of the container's width, x in [0, nStages] stage units, y in [lo, hi].
  function frame(parent, width, height, nStages, lo, hi) {
    const svg = el("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img" }, parent);
    const m = MARGIN, plotW = width - m.l - m.r, plotH = height - m.t - m.b;
    const x = (v) => m.l + (plotW * v) / Math.max(1, nStages);
    const y = (v) => m.t + plotH - (plotH * (v - lo)) / (hi - lo || 1);
    return { svg, width, height, plotW, plotH, x, y, margin: m, segW: plotW / Math.max(1, nStages) };
  }

  function yAxis(f, lo, hi, n, unit, format) {
    const g = el("g", { class: "grid" }, f.svg);
    for (const t of ticks(lo, hi, n)) {
      el("line", { x1: f.margin.l, x2: f.margin.l + f.plotW, y1: f.y(t), y2: f.y(t) }, g);
      el("text", { x: f.margin.l - 5, y: f.y(t) + 4, "text-anchor": "end" }, g, (format || fmt)(t));
    }
    if (unit) {
      el("text", { class: "unit", transform: `translate(11 ${f.margin.t + f.plotH / 2}) rotate(-90)`,
        "text-anchor": "middle" }, g, unit);
    }
  }

  // Alternate shading, dashed boundaries, and each stage's name and size under its segment.
  function stageMarks(f, stages, labels) {
    const g = el("g", { class: "stages" }, f.svg);
    stages.forEach((s, i) => {
      const x0 = f.x(i), x1 = f.x(i + 1);
      if (i % 2 === 1) el("rect", { class: "band", x: x0, y: f.margin.t, width: x1 - x0, height: f.plotH }, g);
      if (i > 0) el("line", { class: "boundary", x1: x0, x2: x0, y1: f.margin.t, y2: f.margin.t + f.plotH }, g);
      if (!labels) return;
      const cx = (x0 + x1) / 2, room = x1 - x0, base = f.margin.t + f.plotH;
      const name = room >= s.name.length * 6.3 ? s.name : `${i + 1}`;
      const t = el("text", { class: "stage-label", x: cx, y: base + 14, "text-anchor": "middle" }, g, name);
      el("title", {}, t, `${i + 1}. ${s.name} (${s.type}, ${s.steps} steps)`);
      const size = `${s.type} · ${s.steps} steps`;
      if (room >= size.length * 5.6) el("text", { class: "stage-size", x: cx, y: base + 27, "text-anchor": "middle" }, g, size);
    });
    el("line", { class: "axis-line", x1: f.margin.l, x2: f.margin.l + f.plotW, y1: f.margin.t + f.plotH,
      y2: f.margin.t + f.plotH }, g);
  }

  function legend(f, rows, title) {
    const g = el("g", { class: "legend" }, f.svg);
    const x = f.width - f.margin.r + 14;
    if (title) el("text", { class: "legend-title", x, y: f.margin.t + 4 }, g, title);
    rows.forEach((r, i) => {
      const y = f.margin.t + (title ? 22 : 6) + i * 18;
      if (r.ring) {
        el("circle", { cx: x + 9, cy: y, r: 6, fill: "none", stroke: "#333", "stroke-width": 1.5 }, g);
      } else if (r.line) {
        el("line", { x1: x, x2: x + 18, y1: y, y2: y, stroke: r.color, "stroke-width": 3 }, g);
        el("circle", { cx: x + 9, cy: y, r: 3.5, fill: r.color }, g);
      } else {
        el("rect", { x, y: y - 6, width: 14, height: 12, fill: r.color }, g);
      }
      el("text", { x: x + 24, y: y + 4 }, g, r.label);
    });
  }

  // Solid runs of a domain's points, and thin dotted joins across stages that did not evaluate it
  // (so a line never pretends to know the reward where nobody measured it).
  function segments(points) {
    const out = [];
    let run = [];
    points.forEach((p, i) => {
      if (i > 0 && p.stage_index > points[i - 1].stage_index + 1) {
        out.push({ gap: false, points: run }, { gap: true, points: [points[i - 1], p] });
        run = [];
      }
      run.push(p);
    });
    if (run.length) out.push({ gap: false, points: run });
    return out;
  }

  // Domains a reward model scores (stages with `reward_model`), and any with a score outside 0..1.
  function unboundedDomains(config, domains) {
    const out = new Set();
    for (const st of (config && config.stages) || []) {
      if (st.reward_model) for (const d of st.domains || []) out.add(d);
    }
    for (const d of domains) if (d.points.some((p) => p.score < 0 || p.score > 1)) out.add(d.domain);
    return out;
  }

  // teachers: RunTeachers JSON -> domain -> [{stage_index (of the MOPD stage), stage_name, checkpoint, score, ...}]
  function teacherPicks(teachers) {
    const out = {};
    for (const st of (teachers && teachers.stages) || []) {
      for (const t of st.teachers) (out[t.domain] = out[t.domain] || []).push({ ...t, mopd: st });
    }
    return out;
  }

  // The point a teacher was chosen from: same domain and checkpoint, before the MOPD stage, the closest score.
  function teacherPoint(points, pick) {
    const same = points.filter((p) => p.checkpoint === pick.checkpoint && p.stage_index < pick.mopd.stage_index);
    same.sort((a, b) => Math.abs(a.score - pick.score) - Math.abs(b.score - pick.score));
    return same[0] || null;
  }

  function panel(parent, width, height, stages, domains, lo, hi, opts) {
    const f = frame(parent, width, height, stages.length, lo, hi);
    const X = stageX(stages);
    stageMarks(f, stages, opts.labels);
    yAxis(f, lo, hi, opts.ticks || 4, opts.unit);
    const rows = [];
    domains.forEach((d) => {
      const color = domainColor(d.domain, d.colorIndex);
      const g = el("g", { class: "domain", "data-domain": d.domain }, f.svg);
      for (const seg of segments(d.points)) {
        el("polyline", {
          points: seg.points.map((p) => `${f.x(X(p.stage_index, p.step_index))},${f.y(p.score)}`).join(" "),
          fill: "none", stroke: color, "stroke-width": seg.gap ? 1.5 : 2.5, "stroke-linejoin": "round",
          "stroke-dasharray": seg.gap ? "2 4" : "none", class: seg.gap ? "gap" : "curve",
        }, g);
      }
      for (const p of d.points) {
        const c = el("circle", { class: "pt", cx: f.x(X(p.stage_index, p.step_index)), cy: f.y(p.score), r: 3.5, fill: color }, g);
        el("title", {}, c, `${d.domain} · ${p.stage_name} ${p.step_index < 0 ? "start" : "step " + (p.step_index + 1)}: ` +
          `${p.score.toFixed(3)} (n=${p.n}, weights v${p.weight_version})`);
      }
      for (const pick of opts.picks[d.domain] || []) {
        const src = teacherPoint(d.points, pick);
        const level = pick.remeasured_score ?? pick.score;
        const m = pick.mopd.stage_index;
        // the teacher's level across the MOPD segment: what the student is drawn towards
        if (level >= lo && level <= hi) {
          el("line", { class: "teacher-level", x1: f.x(m), x2: f.x(m + 1), y1: f.y(level), y2: f.y(level), stroke: color,
            "stroke-width": 1.2, "stroke-dasharray": "5 3" }, g);
        }
        if (!src) continue;
        const cx = f.x(X(src.stage_index, src.step_index)), cy = f.y(src.score);
        const ring = el("circle", { class: "teacher", cx, cy, r: 7, fill: "none", stroke: "#222", "stroke-width": 1.6 }, g);
        el("title", {}, ring, `teacher of ${d.domain} for ${pick.mopd.stage_name}: ${src.stage_name} ` +
          `${src.step_index < 0 ? "start" : "step " + (src.step_index + 1)}, chosen at ${pick.score.toFixed(3)}` +
          (pick.remeasured_score != null ? `, re-measured ${pick.remeasured_score.toFixed(3)}` : ""));
        el("text", { class: "teacher-label", x: cx, y: cy - 10, "text-anchor": "middle" }, g, "T");
      }
      const last = d.points[d.points.length - 1];
      rows.push({ color, line: true, label: `${d.domain}  ${last ? last.score.toFixed(2) : ""}` });
    });
    if (opts.anyPick) rows.push({ ring: true, label: "MOPD teacher (T)" });
    legend(f, rows, opts.title);
    return f;
  }

  // evals: RunEvals JSON; run: RunDetail JSON (stages' steps, the config); teachers: RunTeachers JSON.
  function rewardChart(container, evals, run, teachers) {
    container.textContent = "";
    const width = Math.max(560, container.clientWidth || 900);
    const stages = run.stages.map((s) => ({ index: s.index, name: s.name, type: s.type, steps: s.steps_total }));
    const domains = evals.domains.map((d, i) => ({ ...d, colorIndex: i }));
    const wide = unboundedDomains(run.config, domains);
    const bounded = domains.filter((d) => !wide.has(d.domain)), scored = domains.filter((d) => wide.has(d.domain));
    const picks = teacherPicks(teachers);
    const anyPick = Object.keys(picks).length > 0;
    const main = panel(container, width, 300, stages, bounded, 0, 1,
      { unit: "validation reward (0–1)", labels: !scored.length, picks, anyPick, title: "domain · latest" });
    if (!domains.length) {
      el("text", { x: main.margin.l + main.plotW / 2, y: main.margin.t + main.plotH / 2, "text-anchor": "middle" },
        main.svg, "no evaluation recorded yet");
    }
    if (scored.length) {
      const all = scored.flatMap((d) => d.points.map((p) => p.score));
      let lo = Math.min(...all), hi = Math.max(...all);
      const r = niceRange(lo - Math.max(0.02, 0.1 * (hi - lo)), hi + Math.max(0.02, 0.1 * (hi - lo)), 3);
      const f = panel(container, width, 150, stages, scored, r.lo, r.hi,
        { unit: "reward-model score", ticks: r.n, labels: true, picks, anyPick: false, title: "reward-model scored" });
      f.svg.classList.add("rm-panel");
    }
  }

  // Steps of one stage as bars of at least 2 px: `per` consecutive steps share a bar (their mean).
  function bins(steps, total, segW) {
    const per = Math.max(1, Math.ceil((2 * total) / Math.max(1, segW)));
    const out = [];
    for (let i = 0; i < steps.length; i += per) out.push({ first: i, steps: steps.slice(i, i + per), per });
    return out;
  }

  // metrics: RunMetrics JSON; run: RunDetail JSON (each stage's steps). Stacked bars per step, one colour per phase.
  function timingChart(container, metrics, run) {
    container.textContent = "";
    const width = Math.max(560, container.clientWidth || 900);
    const groups = metrics.phase_groups;
    const stages = run.stages.map((s) => ({ index: s.index, name: s.name, type: s.type, steps: s.steps_total }));
    const total = (st) => groups.reduce((a, g) => a + (st.phase_seconds[g] || 0), 0);
    const all = metrics.stages.flatMap((s) => s.steps);
    const yMax = niceMax(Math.max(0, ...all.map(total)));
    const f = frame(container, width, 200, stages.length, 0, yMax);
    stageMarks(f, stages, true);
    yAxis(f, 0, yMax, 2, "seconds per step");
    const g = el("g", { class: "bars" }, f.svg);
    metrics.stages.forEach((s) => {
      const n = Math.max(1, (stages[s.index] || {}).steps || s.steps.length);
      const steps = [...s.steps].sort((a, b) => a.step_index - b.step_index);
      for (const b of bins(steps, n, f.segW)) {
        const x0 = f.x(s.index + b.first / n), w = Math.max(1, (f.segW * b.per) / n - (b.per === 1 && f.segW / n > 4 ? 1 : 0));
        let base = 0;
        for (const grp of groups) {
          const v = b.steps.reduce((a, st) => a + (st.phase_seconds[grp] || 0), 0) / b.steps.length;
          if (v <= 0) continue;
          const r = el("rect", { x: x0, y: f.y(base + v), width: w, height: f.y(base) - f.y(base + v),
            fill: PHASE_COLORS[grp] || "#ccc" }, g);
          const which = b.steps.length > 1 ? `steps ${b.first + 1}-${b.first + b.steps.length} (mean)` : `step ${b.first + 1}`;
          el("title", {}, r, `${s.name} ${which} · ${grp}: ${v.toFixed(2)} s`);
          base += v;
        }
      }
    });
    const sum = Object.fromEntries(groups.map((grp) => [grp, all.reduce((a, st) => a + (st.phase_seconds[grp] || 0), 0)]));
    const every = Object.values(sum).reduce((a, b) => a + b, 0) || 1;
    legend(f, groups.map((grp) => ({ color: PHASE_COLORS[grp] || "#ccc",
      label: `${grp}  ${fmt(sum[grp])} s (${Math.round((100 * sum[grp]) / every)}%)` })), "phase · total");
  }

  // series: [{key, label, color, dash?, points: [{stage_index, step_index, value}]}]; run: RunDetail JSON. One
  // line per series and stage (a line never joins two stages), each step at its place in its stage's segment;
  // a dashed series is drawn over the others, so a line it coincides with still shows between its dashes.
  function stepChart(container, run, series, opts) {
    container.textContent = "";
    const width = Math.max(560, container.clientWidth || 900);
    const stages = run.stages.map((s) => ({ index: s.index, name: s.name, type: s.type, steps: s.steps_total }));
    const values = series.flatMap((s) => s.points.map((p) => p.value));
    const yMax = niceMax(Math.max(0, ...values));
    const f = frame(container, width, opts.height || 180, stages.length, 0, yMax);
    f.svg.classList.add(opts.cls);
    const X = stageX(stages);
    stageMarks(f, stages, true);
    yAxis(f, 0, yMax, 2, opts.unit, tick);
    for (const s of [...series.filter((x) => !x.dash), ...series.filter((x) => x.dash)]) {
      const g = el("g", { class: "series", "data-series": s.key }, f.svg);
      const byStage = {};
      for (const p of s.points) (byStage[p.stage_index] = byStage[p.stage_index] || []).push(p);
      for (const pts of Object.values(byStage)) {
        pts.sort((a, b) => a.step_index - b.step_index);
        el("polyline", { points: pts.map((p) => `${f.x(X(p.stage_index, p.step_index))},${f.y(p.value)}`).join(" "),
          fill: "none", stroke: s.color, "stroke-width": 2.5, "stroke-linejoin": "round", class: "curve",
          "stroke-dasharray": s.dash || "none" }, g);
        for (const p of pts) {
          const c = el("circle", { class: "pt", cx: f.x(X(p.stage_index, p.step_index)), cy: f.y(p.value), r: 3.5, fill: s.color }, g);
          el("title", {}, c, `${s.label} · ${(stages[p.stage_index] || {}).name} step ${p.step_index + 1}: ${small(p.value)}`);
        }
      }
    }
    legend(f, series.map((s) => {
      const last = s.points[s.points.length - 1];
      return { color: s.color, line: true, label: `${s.label}  ${last ? small(last.value) : ""}` };
    }), opts.title);
  }

  return { rewardChart, timingChart, stepChart, domainColor, stageX, bins, niceRange, DOMAIN_COLORS, PHASE_COLORS,
    fmt, small };
})();
