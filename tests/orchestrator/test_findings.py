"""The report's findings are computed from the evals, in both directions, and rendered plainly."""

from PIL import Image

from services.orchestrator import findings
from services.orchestrator.ledger import EvalRecord, Ledger
from services.orchestrator.report import claims, write_report

STAGES = [
    {"name": "sft", "type": "sft", "domains": ["if", "mcqa"], "steps": 10},
    {"name": "if-rl", "type": "grpo", "domains": ["if"], "steps": 2},
    {"name": "mcqa-rl", "type": "grpo", "domains": ["mcqa"], "steps": 2},
    {"name": "mopd", "type": "mopd", "domains": ["if", "mcqa"], "steps": 2},
]


def ev(stage, step, domain, score):
    return EvalRecord(stage, step, 0, f"ckpt-{stage}-{step}", domain, score, 8)


EVALS = [
    ev(0, -1, "if", 0.0), ev(0, 9, "if", 0.2), ev(0, -1, "mcqa", 0.0), ev(0, 9, "mcqa", 0.3),
    ev(1, -1, "if", 0.2), ev(1, 1, "if", 0.6),                      # IF-RL raises if
    ev(2, -1, "mcqa", 0.3), ev(2, 1, "mcqa", 0.5), ev(2, 1, "if", 0.4),  # ... and mcqa-rl lowers it
    ev(3, -1, "if", 0.4), ev(3, 1, "if", 0.57), ev(3, 1, "mcqa", 0.5),
]
TEACHERS = {3: {"if": ("ckpt-1-1", 0.6), "mcqa": ("ckpt-2-1", 0.5)}}


def test_stage_gains_compare_each_rl_stage_with_its_start():
    gains = {(g.stage, g.domain): (g.start, g.end, g.holds) for g in findings.stage_gains(STAGES, EVALS)}
    assert gains[("if-rl", "if")] == (0.2, 0.6, True)
    assert gains[("mcqa-rl", "mcqa")] == (0.3, 0.5, True)
    assert ("sft", "if") not in gains


def test_forgetting_is_found_and_not_invented():
    found = findings.forgetting(STAGES, EVALS)
    assert [(f.domain, f.learned_in, f.lowered_by, f.level, f.lowered_to) for f in found] == [
        ("if", "if-rl", "mcqa-rl", 0.6, 0.4)]
    steady = [e if (e.stage_index, e.domain) != (3, "if") else ev(3, e.step_index, "if", 0.6)
              for e in EVALS if not (e.stage_index == 2 and e.domain == "if")]
    assert [f.domain for f in findings.forgetting(STAGES, steady)] == []


def test_mopd_recovery_against_the_chosen_teacher():
    rec = {r.domain: r for r in findings.mopd_recovery(STAGES, EVALS, TEACHERS)}
    assert rec["if"].fraction == 0.57 / 0.6 and rec["if"].holds
    assert rec["mcqa"].holds
    worse = [e if not (e.stage_index == 3 and e.domain == "if") else ev(3, 1, "if", 0.5) for e in EVALS]
    assert not {r.domain: r for r in findings.mopd_recovery(STAGES, worse, TEACHERS)}["if"].holds


def test_mopd_recovery_compares_the_fresh_draws_of_student_and_teacher_where_both_exist():
    """The score that chose a teacher is the best of several noisy ones; the stage's paired fresh draws are
    compared instead, and never a fresh draw with an evaluation under the other seed."""
    fresh = {3: {"teacher": {"mcqa": 0.4, "if": 0.5}, "student": {"mcqa": 0.45}}}
    rec = {r.domain: r for r in findings.mopd_recovery(STAGES, EVALS, TEACHERS, fresh)}
    assert (rec["mcqa"].teacher_score, rec["mcqa"].end, rec["mcqa"].chosen_score) == (0.4, 0.45, 0.5)
    assert rec["mcqa"].fraction == 0.45 / 0.4
    assert (rec["if"].teacher_score, rec["if"].end, rec["if"].chosen_score) == (0.6, 0.57, None), "no student draw: as before"
    low = {3: {"teacher": {"mcqa": 0.4}, "student": {"mcqa": 0.3}}}
    assert not {r.domain: r for r in findings.mopd_recovery(STAGES, EVALS, TEACHERS, low)}["mcqa"].holds
    _claim, _ok, evidence = claims(STAGES, EVALS, TEACHERS, fresh)[-1]
    assert evidence.startswith("both drawn again with one fresh seed")
    assert "mcqa: 0.45 vs teacher 0.40 [0.50] (112%)" in evidence and "if: 0.57 vs teacher 0.60 (95%)" in evidence


def test_claims_say_plainly_when_a_claim_does_not_hold():
    flat = [e if not (e.stage_index == 1 and e.step_index == 1) else ev(1, 1, "if", 0.1) for e in EVALS]
    verdicts = {c.split()[0] + " " + c.split()[1]: ok for c, ok, _ in claims(STAGES, flat, TEACHERS)}
    assert verdicts == {"each RL": False, "a later": True, "MOPD brings": True}


def test_write_report_draws_pngs_and_html(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path}/ledger.sqlite")
    run = ledger.create_run("demo", {"stages": STAGES})
    for i, st in enumerate(STAGES):
        ledger.begin_stage(run, i, st["name"], st["type"], st["steps"])
        for k in range(st["steps"]):
            rec = ledger.begin_step(run, i, k)
            ledger.advance(rec.step_id, "trained", seconds=0.5)
    for e in EVALS:
        ledger.record_eval(run, e.stage_index, e.step_index, 0, e.checkpoint, e.domain, e.score, e.n)
    for d, (ckpt, score) in TEACHERS[3].items():
        ledger.record_teacher(run, 3, d, ckpt, score)
    page = write_report(ledger, run, tmp_path / "report")
    text = page.read_text()
    assert "mcqa-rl" in text and "holds" in text and "rewards.png" in text
    for png in ("rewards.png", "step_times.png"):
        with Image.open(tmp_path / "report" / png) as img:
            assert img.size[0] > 800 and len(img.convert("RGB").getcolors(1_000_000)) > 10
