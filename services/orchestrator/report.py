"""The run report: HTML with plots, the same plots as PNG, and what the numbers say.

`write_report(ledger, run_id, out_dir)` draws the per-domain validation reward across all steps of
all stages (one line per domain, stage boundaries marked — the picture of forgetting and MOPD
recovery) and the step time per phase, then writes `report.html` with the stage x domain table
and the findings of services.orchestrator.findings stated plainly, as they came out.
"""

from __future__ import annotations

import html
from pathlib import Path

from services.orchestrator import findings
from services.orchestrator.ledger import Ledger

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


def plot_rewards(stages, evals, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = _timeline(stages, evals)
    fig, ax = plt.subplots(figsize=(11, 4.5), dpi=110)
    for domain, points in sorted(lines.items()):
        xs, ys = zip(*points)
        ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.6, label=domain)
    for i in range(len(stages)):
        ax.axvline(i, color="#999", linestyle="--", linewidth=0.8)
    ax.set_xticks([i + 0.5 for i in range(len(stages))])
    ax.set_xticklabels([f"{st['name']}\n({st['type']}, {st['steps']} steps)" for st in stages], fontsize=8)
    ax.set_xlim(-0.05, len(stages) + 0.05)
    ax.set_xlabel("stage (each stage's steps spread over its own segment)")
    ax.set_ylabel("validation reward")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.tight_layout()
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
    page.write_text(render_html(run, stages, evals, teachers, fresh))
    return page


def teacher_records(ledger: Ledger, run_id: int, stages: list[dict]) -> tuple[dict, dict]:
    """({MOPD stage: {domain: (checkpoint, score that chose it)}}, {MOPD stage: {role: {domain: fresh draw}}})."""
    mopd = [i for i, st in enumerate(stages) if st["type"] == "mopd"]
    return ({i: ledger.teachers(run_id, i) for i in mopd},
            {i: ledger.fresh_draws(run_id, i) for i in mopd})


def claims(stages, evals, teachers, fresh=None) -> list[tuple[str, bool, str]]:
    """(claim, holds, evidence) — what the report states, in plain words."""
    gains = findings.stage_gains(stages, evals)
    forgot = findings.forgetting(stages, evals)
    recovery = findings.mopd_recovery(stages, evals, teachers, fresh)
    rl = [g for g in gains if not any(st["name"] == g.stage and st["type"] == "mopd" for st in stages)]
    out = [(
        "each RL stage raises its own domains' validation reward over the model it started from",
        bool(rl) and all(g.holds for g in rl),
        "; ".join(f"{g.stage}/{g.domain}: {g.start:.2f} → {g.end:.2f}" for g in rl) or "no RL stage evaluated",
    ), (
        "a later stage lowers an earlier domain's reward (forgetting)",
        bool(forgot),
        "; ".join(f"{f.domain}: {f.level:.2f} after {f.learned_in} → {f.lowered_to:.2f} after {f.lowered_by}"
                  for f in forgot) or "no domain was lowered",
    )]
    if recovery:
        out.append((
            f"MOPD brings every domain to ≥ {findings.RECOVERY_TARGET:.0%} of its best teacher",
            all(r.holds for r in recovery),
            ("both drawn again with one fresh seed (the teacher's choosing score in brackets): "
             if any(r.chosen_score is not None for r in recovery) else "")
            + "; ".join(f"{r.domain}: {r.end:.2f} vs teacher {r.teacher_score:.2f}"
                        + (f" [{r.chosen_score:.2f}]" if r.chosen_score is not None else "")
                        + f" ({r.fraction:.0%})" for r in recovery),
        ))
    return out


def render_html(run, stages, evals, teachers, fresh=None) -> str:
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
        f"<li class={'yes' if ok else 'no'}><b>{'holds' if ok else 'does not hold'}</b>: {html.escape(c)}"
        f"<br><small>{html.escape(ev)}</small></li>" for c, ok, ev in claims(stages, evals, teachers, fresh))
    head = "".join(f"<th>{html.escape(d)}</th>" for d in domains)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>Cascade run {run.id}: {html.escape(run.name)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1200px}}td,th{{padding:4px 10px;border-bottom:1px solid #ddd;text-align:right}}
td:first-child,th:first-child{{text-align:left}}.yes b{{color:#157a2c}}.no b{{color:#b3261e}}</style></head><body>
<h1>Run {run.id} · {html.escape(run.name)} · {run.status}</h1>
<h2>What the numbers say</h2><ul>{verdicts}</ul>
<h2>Validation reward per domain across the cascade</h2><img src="rewards.png" alt="per-domain validation reward" width="100%">
<h2>Validation reward per stage (start → end)</h2><table><tr><th>stage</th><th>type</th>{head}</tr>{''.join(rows)}</table>
<h2>Step time per phase</h2><img src="step_times.png" alt="step time per phase" width="100%">
</body></html>"""
