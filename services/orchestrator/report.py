"""The run report: HTML with plots, the same plots as PNG, and what the numbers say.

`write_report(ledger, run_id, out_dir)` draws the per-domain validation reward across all steps of
all stages (one line per domain, a marker per evaluation, reward-model scores on their own right-hand
axis, stage boundaries marked — the picture of forgetting and MOPD recovery) and the step time per
phase, then writes `report.html` with the stage x domain table and the findings of
services.orchestrator.findings stated plainly, as they came out: each claim holds, is not shown or
fails by its paired 95 % interval, and says so with the interval.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

from services.orchestrator import findings, intervals
from services.orchestrator.ledger import Ledger

VERDICT_CLASS = {intervals.HOLDS: "yes", intervals.NOT_SHOWN: "open", intervals.FAILS: "no"}
PHASES = ("generated", "scored", "trained", "published", "synced")
PHASE_LABELS = {"generated": "generate", "scored": "score / teacher", "trained": "train",
                "published": "publish", "synced": "sync"}


def _timeline(stages: list[dict], evals) -> dict[str, list[tuple[float, float]]]:
    """x of an eval: every stage gets a segment of width 1 whatever its step count (SFT's hundreds of
    steps would otherwise squash the RL stages); the baseline (step -1) sits at the segment's start
    and step k at i + (k + 1) / steps."""
    lines: dict[str, list[tuple[float, float]]] = {}
    for e in sorted(evals, key=lambda e: (e.stage_index, e.step_index)):
        x = e.stage_index + (e.step_index + 1) / stages[e.stage_index]["steps"]
        lines.setdefault(e.domain, []).append((x, e.score))
    return lines


REWARD_MODEL_DOMAINS = frozenset({"rlhf"})
"""Domains scored by a reward model (services/reward/verifiers/rlhf.py): a raw Bradley–Terry score
(any real number) or a judge's expected rating (0..9, services/reward/genrm.py), not a pass rate."""


def own_axis(domain: str, scores) -> bool:
    """A domain is drawn on the right-hand axis when its score is not a pass rate: it is scored by a
    reward model (REWARD_MODEL_DOMAINS), or any of its recorded scores lies outside [0, 1]."""
    return domain in REWARD_MODEL_DOMAINS or any(not 0.0 <= s <= 1.0 for s in scores)


def axis_label(domain: str) -> str:
    """What a right-hand-axis domain's score is, for its legend entry."""
    if domain in REWARD_MODEL_DOMAINS:
        return f"{domain}: reward-model score"
    return f"{domain}: reward (not 0..1)"


def score_limits(scores, margin: float = 0.08) -> tuple[float, float]:
    """y limits that hold every score: [lo - m, hi + m] with m = margin * (hi - lo), or m = 0.5 when all
    scores are equal (a flat line still gets a readable axis)."""
    lo, hi = min(scores), max(scores)
    pad = margin * (hi - lo) if hi > lo else 0.5
    return lo - pad, hi + pad


def rewards_figure(stages, evals):
    """The matplotlib figure of plot_rewards: pass-rate domains on the left axis (0..1), the others
    (own_axis) on a right-hand twin axis scaled to their scores; one legend for both. Every recorded
    evaluation is a marker at its place in its stage's segment (_timeline)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = _timeline(stages, evals)
    right = {d for d, points in lines.items() if own_axis(d, [y for _, y in points])}
    fig, ax = plt.subplots(figsize=(11, 4.5), dpi=110)
    twin = ax.twinx() if right else None
    for n, (domain, points) in enumerate(sorted(lines.items())):
        xs, ys = zip(*points)
        if domain in right:
            twin.plot(xs, ys, marker="s", markersize=3.5, linewidth=1.6, linestyle="--", color=f"C{n}",
                      label=axis_label(domain))
        else:
            ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.6, color=f"C{n}", label=domain)
    for i in range(len(stages)):
        ax.axvline(i, color="#999", linestyle="--", linewidth=0.8)
    ax.set_xticks([i + 0.5 for i in range(len(stages))])
    ax.set_xticklabels([f"{st['name']}\n({st['type']}, {st['steps']} steps)" for st in stages], fontsize=8)
    ax.set_xlim(-0.05, len(stages) + 0.05)
    ax.set_xlabel("stage (each stage's steps spread over its own segment)")
    ax.set_ylabel("validation reward (pass rate)" if right else "validation reward")
    ax.set_ylim(-0.02, 1.02)
    handles, labels = ax.get_legend_handles_labels()
    if twin is not None:
        twin.set_ylim(*score_limits([y for d in right for _, y in lines[d]]))
        twin.set_ylabel("reward-model score (dashed)" if all(d in REWARD_MODEL_DOMAINS for d in right)
                       else "score (dashed)")
        more = twin.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    anchor = (1.0 if twin is None else 1.08, 0.5)  # right of the right axis' labels when there is one
    ax.legend(handles, labels, loc="center left", bbox_to_anchor=anchor, fontsize=8)
    fig.tight_layout()
    return fig


def plot_rewards(stages, evals, path: Path) -> None:
    """Draw rewards_figure to `path` (PNG)."""
    fig = rewards_figure(stages, evals)
    import matplotlib.pyplot as plt

    fig.savefig(path)
    plt.close(fig)


def plot_step_times(stages, steps, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [st["name"] for st in stages]
    fig, ax = plt.subplots(figsize=(11, 3.5), dpi=110)
    bottom = [0.0] * len(stages)
    for phase in PHASES:
        means = []
        for i in range(len(stages)):
            times = [s.timings.get(phase, 0.0) for s in steps if s.stage_index == i]
            means.append(sum(times) / len(times) if times else 0.0)
        ax.bar(names, means, bottom=bottom, label=PHASE_LABELS[phase])
        bottom = [b + m for b, m in zip(bottom, means)]
    ax.set_ylabel("seconds per step (mean)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_report(ledger: Ledger, run_id: int, out_dir: Path) -> Path:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    run = ledger.run(run_id)
    stages, evals, steps = run.config["stages"], ledger.evals(run_id), ledger.steps(run_id)
    teachers, fresh = teacher_records(ledger, run_id, stages)
    plot_rewards(stages, evals, out_dir / "rewards.png")
    plot_step_times(stages, steps, out_dir / "step_times.png")
    page = out_dir / "report.html"
    page.write_text(render_html(run, stages, evals, teachers, fresh, ledger.prompt_scores(run_id)))
    return page


def teacher_records(ledger: Ledger, run_id: int, stages: list[dict]) -> tuple[dict, dict]:
    """({MOPD stage: {domain: (checkpoint, score that chose it)}}, {MOPD stage: {role: {domain: fresh draw}}})."""
    mopd = [i for i, st in enumerate(stages) if st["type"] == "mopd"]
    return ({i: ledger.teachers(run_id, i) for i in mopd},
            {i: ledger.fresh_draws(run_id, i) for i in mopd})


@dataclass(frozen=True)
class Figure:
    """One comparison a claim rests on: `subject` (e.g. `rl/mcqa`), the paired per-prompt estimate
    (a difference; for recovery the fraction of the teacher), its 95 % interval over n prompts
    (None without per-prompt scores) and its own verdict."""

    subject: str
    kind: str
    """`change` (after - before, in reward) or `fraction` (of the teacher's reward)."""
    estimate: float
    low: float | None
    high: float | None
    n: int
    verdict: str


def _fig(subject: str, point: float, ci, verdict: str, kind: str = "change") -> Figure:
    if ci is None:
        return Figure(subject, kind, point, None, None, 0, verdict)
    return Figure(subject, kind, ci.estimate, ci.low, ci.high, ci.n, verdict)


@dataclass(frozen=True)
class Claim:
    """One claim as the report states it: its words, its verdict (holds / not shown / fails: see
    services.orchestrator.intervals) and the figures it rests on, each with its 95 % interval."""

    claim: str
    verdict: str
    evidence: str
    figures: tuple[Figure, ...] = ()

    @property
    def holds(self) -> bool:
        return self.verdict == intervals.HOLDS


def _all(items) -> str:
    """Every item must hold: holds when all do, fails when any fails, else not shown."""
    got = [x.verdict for x in items]
    if got and all(v == intervals.HOLDS for v in got):
        return intervals.HOLDS
    return intervals.FAILS if intervals.FAILS in got else intervals.NOT_SHOWN


def _figure(ci) -> str:
    return f"{ci}, n={ci.n}" if ci is not None else "no per-prompt scores"


def claims(stages, evals, teachers, fresh=None, prompts=None) -> list[Claim]:
    """The claims over the run's evaluations (`prompts`: Ledger.prompt_scores, for the intervals)."""
    gains = findings.stage_gains(stages, evals, prompts)
    forgot = findings.forgetting(stages, evals, prompts)
    recovery = findings.mopd_recovery(stages, evals, teachers, fresh, prompts)
    rl = [g for g in gains if not any(st["name"] == g.stage and st["type"] == "mopd" for st in stages)]
    seen = [f.verdict for f in forgot]
    out = [Claim(
        f"each RL stage raises its own domains' validation reward over the model it started from "
        f"(by ≥ {findings.GAIN_THRESHOLD:.2f}, 95 % interval above zero)",
        _all(rl),
        "; ".join(f"{g.stage}/{g.domain}: {g.start:.2f} → {g.end:.2f} ({_figure(g.interval)}: {g.verdict})"
                  for g in rl) or "no RL stage evaluated",
        tuple(_fig(f"{g.stage}/{g.domain}", g.end - g.start, g.interval, g.verdict) for g in rl),
    ), Claim(
        f"a later stage lowers an earlier domain's reward (forgetting: by ≥ {findings.FORGET_THRESHOLD:.2f}, "
        f"95 % interval below zero)",
        intervals.HOLDS if intervals.HOLDS in seen else
        (intervals.FAILS if seen and all(v == intervals.FAILS for v in seen) else intervals.NOT_SHOWN),
        "; ".join(f"{f.domain}: {f.level:.2f} after {f.learned_in} → {f.lowered_to:.2f} after {f.lowered_by} "
                  f"({_figure(f.interval)}: {'counts' if f.holds else f.verdict})"
                  for f in forgot if f.lowered_to < f.level or f.holds) or "no domain was lowered",
        tuple(_fig(f"{f.domain}: {f.learned_in} → {f.lowered_by}", f.lowered_to - f.level, f.interval, f.verdict)
              for f in forgot),
    )]
    if recovery:
        out.append(Claim(
            f"MOPD brings every domain to ≥ {findings.RECOVERY_TARGET:.0%} of its best teacher "
            f"(95 % interval of student - {findings.RECOVERY_TARGET} × teacher above zero)",
            _all(recovery),
            ("both drawn again with one fresh seed (the teacher's choosing score in brackets): "
             if any(r.chosen_score is not None for r in recovery) else "")
            + "; ".join(_recovery_words(r) for r in recovery),
            tuple(_fig(r.domain, r.fraction, r.interval, r.verdict, "fraction") for r in recovery if r.scored),
        ))
    return out


def _recovery_words(r: findings.Recovery) -> str:
    if not r.scored:
        return (f"{r.domain}: {r.end:.2f} vs a teacher this run did not score (an explicit checkpoint that no "
                f"evaluation here drew; `teachers: auto` picks scored ones): {r.verdict}")
    return (f"{r.domain}: {r.end:.2f} vs teacher {r.teacher_score:.2f}"
            + (f" [{r.chosen_score:.2f}]" if r.chosen_score is not None else "")
            + f" ({r.fraction:.0%}"
            + (f", interval [{r.interval.low:.0%}, {r.interval.high:.0%}], n={r.interval.n}"
               if r.interval is not None else ", no per-prompt scores")
            + f": {r.verdict})")


def run_claims(ledger: Ledger, run_id: int) -> list[Claim]:
    """The claims of run `run_id` as its ledger stands."""
    stages = ledger.run(run_id).config["stages"]
    teachers, fresh = teacher_records(ledger, run_id, stages)
    return claims(stages, ledger.evals(run_id), teachers, fresh, ledger.prompt_scores(run_id))


def render_html(run, stages, evals, teachers, fresh=None, prompts=None) -> str:
    domains = sorted({e.domain for e in evals})
    rows = []
    for i, st in enumerate(stages):
        cells = []
        for d in domains:
            pts = sorted((e for e in evals if e.stage_index == i and e.domain == d), key=lambda e: e.step_index)
            cells.append(f"{pts[0].score:.2f} → {pts[-1].score:.2f}" if len(pts) > 1 else
                         (f"{pts[0].score:.2f}" if pts else ""))
        rows.append(f"<tr><td>{html.escape(st['name'])}</td><td>{st['type']}</td>"
                    + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    verdicts = "".join(
        f"<li class={VERDICT_CLASS[c.verdict]}><b>{c.verdict}</b>: {html.escape(c.claim)}"
        f"<br><small>{html.escape(c.evidence)}</small></li>" for c in claims(stages, evals, teachers, fresh, prompts))
    head = "".join(f"<th>{html.escape(d)}</th>" for d in domains)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>Cascade run {run.id}: {html.escape(run.name)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1200px}}td,th{{padding:4px 10px;border-bottom:1px solid #ddd;text-align:right}}
td:first-child,th:first-child{{text-align:left}}.yes b{{color:#157a2c}}.no b{{color:#b3261e}}.open b{{color:#8a6d00}}</style></head><body>
<h1>Run {run.id} · {html.escape(run.name)} · {run.status}</h1>
<h2>What the numbers say</h2><ul>{verdicts}</ul>
<h2>Validation reward per domain across the cascade</h2><img src="rewards.png" alt="per-domain validation reward" width="100%">
<h2>Validation reward per stage (start → end)</h2><table><tr><th>stage</th><th>type</th>{head}</tr>{''.join(rows)}</table>
<h2>Step time per phase</h2><img src="step_times.png" alt="step time per phase" width="100%">
</body></html>"""
