// The run page: run list, stage timeline, reward and step-time charts (charts.js), multi-turn episode
// figures of the stages with an environment, the train/inference mismatch, MOPD teachers.
// Reads the control API with relative URLs (so it works behind a path prefix) and refreshes itself
// every few seconds (?refresh=SECONDS, 0 = never). Without ?run= it follows the newest run (so a page
// opened before a run is submitted shows it when it starts) until a run is picked from the list.
// Never writes: cancelling is `POST /runs/{id}/cancel`.
"use strict";

const params = new URLSearchParams(location.search);
const state = {
  selected: params.has("run") ? Number(params.get("run")) : null,
  follow: !params.has("run"),
  refreshS: params.has("refresh") ? Number(params.get("refresh")) : 5,
  data: null,
};

class ApiError extends Error {
  constructor(status, detail) { super(detail); this.status = status; }
}

async function api(path) {
  const res = await fetch(path, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (!res.ok) {
    let detail = res.statusText;
    try { detail = (await res.json()).detail || detail; } catch (e) { /* not JSON */ }
    throw new ApiError(res.status, detail);
  }
  return res.json();
}

function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function statusBadge(status) { return h("span", { class: `status ${status}` }, status); }

function banner(message) {
  const b = document.getElementById("banner");
  b.hidden = !message;
  b.textContent = message || "";
}

function renderRunList(runs) {
  const body = document.querySelector("#run-list tbody");
  body.textContent = "";
  document.getElementById("no-runs").hidden = runs.length > 0;
  for (const r of [...runs].reverse()) {
    const row = h("tr", { "data-run": r.id, class: r.id === state.selected ? "selected" : "" },
      h("td", {}, r.id), h("td", {}, r.name), h("td", {}, statusBadge(r.status)),
      h("td", {}, `${r.steps_done}/${r.steps_total}`));
    row.addEventListener("click", () => select(r.id));
    body.append(row);
  }
}

function renderSummary(run) {
  const s = document.getElementById("summary");
  s.textContent = "";
  s.append(h("span", { class: "title" }, `run ${run.id} · ${run.name}`), statusBadge(run.status),
    h("span", {}, `stages ${run.stages_done}/${run.stages_total}`),
    h("span", {}, `steps ${run.steps_done}/${run.steps_total}`),
    h("span", { class: "muted" }, `started ${new Date(run.created_at).toLocaleString()}`));
  if (run.cancel_requested && run.status === "running") s.append(h("span", { class: "muted" }, "cancel requested"));
  if (run.error) s.append(h("div", { class: "error" }, run.error));
}

function renderTimeline(run) {
  const t = document.getElementById("timeline");
  t.textContent = "";
  for (const st of run.stages) {
    const pct = st.steps_total ? (100 * st.steps_done) / st.steps_total : 0;
    const phase = st.current_phase ? ` · ${st.current_phase}` : "";
    t.append(h("div", { class: `stage ${st.status}`, title: `${st.name}: ${st.domains.join(", ")}` },
      h("div", { class: "name" }, `${st.index + 1}. ${st.name}`),
      h("div", { class: "meta" }, `${st.type} · ${st.steps_done}/${st.steps_total}${phase}`),
      h("div", { class: "meta" }, st.domains.join(" ")),
      h("div", { class: "bar" }, h("div", { style: `width:${pct.toFixed(1)}%` }))));
  }
}

function renderPhaseTable(metrics) {
  const table = document.getElementById("phase-table");
  table.textContent = "";
  const groups = metrics.phase_groups;
  table.append(h("tr", {}, h("th", {}, "stage · mean s/step"), ...groups.map((g) => h("th", {}, g)), h("th", {}, "total")));
  for (const st of metrics.stages.filter((s) => s.steps.length)) {
    const mean = (g) => st.steps.reduce((a, x) => a + (x.phase_seconds[g] || 0), 0) / st.steps.length;
    const cells = groups.map((g) => mean(g));
    table.append(h("tr", {}, h("td", {}, `${st.index + 1}. ${st.name}`),
      ...cells.map((v) => h("td", {}, v ? Charts.fmt(v) : "–")),
      h("td", {}, Charts.fmt(cells.reduce((a, b) => a + b, 0)))));
  }
}

const EPISODE_SERIES = [
  { key: "turns_mean", label: "turns / episode", color: "#1b9e77", value: (s) => s.turns_mean },
  { key: "tool_errors", label: "tool errors / episode", color: "#d95f02",
    value: (s) => (s.episodes ? s.tool_errors / s.episodes : null) },
];

function verdictText(verdicts) {
  const parts = Object.entries(verdicts).filter(([, n]) => n > 0).map(([v, n]) => `${v} ${n}`);
  return parts.length ? parts.join(" · ") : "–";
}

function renderEpisodes(episodes, run) {
  const section = document.getElementById("episodes-section");
  section.hidden = !episodes.stages.length;
  if (section.hidden) return;
  const series = EPISODE_SERIES.map((s) => ({ ...s, points: episodes.stages.flatMap((st) => st.steps
    .map((step) => ({ stage_index: st.stage_index, step_index: step.step_index, value: s.value(step) }))
    .filter((p) => p.value !== null && p.value !== undefined)) }));
  Charts.stepChart(document.getElementById("episodes-chart"), run, series,
    { unit: "per episode", cls: "episodes-chart", title: "per step · latest" });
  const table = document.getElementById("episodes");
  table.textContent = "";
  // each figure's cell carries the API's number (data-value) next to what it shows
  const cell = (v, f) => (v === null || v === undefined ? h("td", {}, "–") : h("td", { "data-value": String(v) }, f(v)));
  const count = (v) => cell(v, String);
  table.append(h("tr", {}, h("th", {}, "stage"), h("th", {}, "env"), h("th", {}, "steps"), h("th", {}, "episodes"),
    h("th", {}, "turns / episode"), h("th", {}, "tool errors"), h("th", {}, "env s"), h("th", {}, "env s / turn"),
    h("th", { title: "fresh episodes opened after the env service lost one; lost: masked, retries spent" }, "env retries · lost"),
    h("th", {}, "verdicts")));
  for (const st of episodes.stages) {
    table.append(h("tr", { "data-stage": st.stage_index }, h("td", {}, `${st.stage_index + 1}. ${st.stage_name}`),
      h("td", {}, st.env), count(st.steps.length), count(st.episodes), cell(st.turns_mean, (v) => v.toFixed(2)),
      count(st.tool_errors), cell(st.env_seconds, Charts.small), cell(st.env_seconds_per_turn, Charts.small),
      h("td", {}, `${st.env_retries} · ${st.env_lost}`), h("td", { class: "verdicts" }, verdictText(st.verdicts))));
  }
}

const MISMATCH_SERIES = [
  { key: "mismatch_mean", label: "mean", color: "#3182bd" },
  { key: "mismatch_p99", label: "p99", color: "#e6550d", dash: "6 4" },
  { key: "mismatch_max", label: "max", color: "#756bb1" },
];

function renderMismatch(mismatch, run) {
  const section = document.getElementById("mismatch-section");
  section.hidden = !mismatch.stages.length;
  if (section.hidden) return;
  const series = MISMATCH_SERIES.map((s) => ({ ...s, points: mismatch.stages.flatMap((st) => st.points
    .filter((p) => s.key in p.stats)
    .map((p) => ({ stage_index: st.stage_index, step_index: p.step_index, value: p.stats[s.key] }))) }));
  Charts.stepChart(document.getElementById("mismatch-chart"), run, series,
    { unit: "|Δ log π| per token", cls: "mismatch-chart", title: "per token · latest" });
  const table = document.getElementById("mismatch");
  table.textContent = "";
  const names = { mismatch_mean: "mean |Δ|", mismatch_p99: "p99 |Δ|", mismatch_max: "max |Δ|",
    window_dropped_fraction: "outside MOPD window", kl_inf_train: "KL(π_inf‖π_train) / seq" };
  table.append(h("tr", {}, h("th", {}, "stage · latest step"), ...mismatch.stats.map((s) => h("th", {}, names[s] || s))));
  for (const st of mismatch.stages) {
    const last = st.points[st.points.length - 1];
    table.append(h("tr", { "data-stage": st.stage_index }, h("td", {}, `${st.stage_index + 1}. ${st.stage_name} · step ${last.step_index + 1}`),
      ...mismatch.stats.map((s) => (s in last.stats
        ? h("td", { "data-stat": s, "data-value": String(last.stats[s]) }, Charts.small(last.stats[s]))
        : h("td", { "data-stat": s }, "–")))));
  }
}

function renderTeachers(teachers) {
  const table = document.getElementById("teachers");
  table.textContent = "";
  if (!teachers.stages.length) {
    table.append(h("tr", {}, h("td", { class: "muted" }, "no MOPD stage has begun")));
    return;
  }
  table.append(h("tr", {}, h("th", {}, "stage"), h("th", {}, "domain"), h("th", {}, "teacher checkpoint"),
    h("th", { title: "the validation score that chose it" }, "score"),
    h("th", { title: "drawn again with a fresh seed when the stage started" }, "re-measured"),
    h("th", { title: "the stage's final weights under the same fresh seed" }, "student")));
  for (const st of teachers.stages) {
    for (const t of st.teachers) {
      const shown = (v) => (v === null || v === undefined ? "—" : v.toFixed(3));
      table.append(h("tr", {}, h("td", {}, `${st.stage_index + 1}. ${st.stage_name}`), h("td", {}, t.domain),
        h("td", { title: t.checkpoint }, t.checkpoint.split("/").slice(-2).join("/")), h("td", {}, t.score.toFixed(3)),
        h("td", {}, shown(t.remeasured_score)), h("td", {}, shown(t.student_score))));
    }
  }
}

function renderClaims(claims) {
  const list = document.getElementById("claims");
  list.textContent = "";
  document.getElementById("claims-when").textContent = claims.final ? "— the run has ended" : "— so far; they may change as the run goes on";
  if (!claims.claims.length) {
    list.append(h("li", { class: "muted" }, "none yet: no stage has been evaluated"));
    return;
  }
  const cls = { "holds": "yes", "not shown": "open", "fails": "no" };
  const pct = (x) => `${(x * 100).toFixed(0)} %`;
  const signed = (x) => (x >= 0 ? "+" : "") + x.toFixed(2);
  for (const c of claims.claims) {
    const verdict = claims.final ? c.verdict : `${c.verdict} so far`;
    const figures = h("ul", { class: "figures" });
    for (const f of c.figures || []) {
      const show = f.kind === "fraction" ? pct : signed;
      const ci = f.low === null ? "no per-prompt scores" : `95 % interval [${show(f.low)}, ${show(f.high)}], n=${f.n}`;
      figures.append(h("li", { class: cls[f.verdict] }, `${f.subject}: ${show(f.estimate)} (${ci}): ${f.verdict}`));
    }
    list.append(h("li", { class: cls[c.verdict] }, h("b", {}, verdict), `: ${c.claim}`,
      h("div", { class: "evidence" }, c.evidence), figures));
  }
}

function renderRun() {
  const d = state.data;
  document.getElementById("run").hidden = !d;
  if (!d) return;
  renderSummary(d.run);
  renderTimeline(d.run);
  renderClaims(d.claims);
  Charts.rewardChart(document.getElementById("rewards"), d.evals, d.run, d.teachers);
  Charts.timingChart(document.getElementById("timings"), d.metrics, d.run);
  renderPhaseTable(d.metrics);
  renderEpisodes(d.episodes, d.run);
  renderMismatch(d.mismatch, d.run);
  renderTeachers(d.teachers);
}

async function refresh() {
  try {
    const runs = await api("runs");
    if ((state.follow || state.selected === null) && runs.length) state.selected = runs[runs.length - 1].id;
    renderRunList(runs);
    if (state.selected !== null) {
      const base = `runs/${state.selected}`;
      const [run, evals, metrics, teachers, claims, episodes, mismatch] = await Promise.all(
        [base, `${base}/evals`, `${base}/metrics`, `${base}/teachers`, `${base}/claims`, `${base}/episodes`,
          `${base}/mismatch`].map(api));
      state.data = { run, evals, metrics, teachers, claims, episodes, mismatch };
    }
    renderRun();
    banner("");
    const every = state.refreshS > 0 ? ` · refreshes every ${state.refreshS} s` : "";
    document.getElementById("refresh").textContent = `updated ${new Date().toLocaleTimeString()}${every}`;
  } catch (err) {
    if (err.status === 401) banner("This API needs its token: open this page once as /?token=<CASCADE_API_TOKEN>.");
    else banner(`Could not load: ${err.message}`);
  }
}

function select(runId) {
  state.selected = runId;
  state.follow = false;
  state.data = null;
  params.set("run", runId);
  history.replaceState(null, "", `?${params}`);
  refresh();
}

window.addEventListener("resize", renderRun);
refresh();
if (state.refreshS > 0) setInterval(refresh, state.refreshS * 1000);
