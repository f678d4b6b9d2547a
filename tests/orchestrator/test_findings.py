"""The report's findings are computed from the evals and the per-prompt scores behind them, with a
paired interval each: they hold, are not shown, or fail, and are rendered plainly."""

from PIL import Image

from services.orchestrator import findings
from services.orchestrator.intervals import FAILS, HOLDS, NOT_SHOWN
from services.orchestrator.ledger import EvalRecord, Ledger
from services.orchestrator.report import (
    _timeline,
    claims,
    own_axis,
    rewards_figure,
    score_limits,
    write_report,
)

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
N = 100


def passing(score: float, shift: int = 0) -> dict[str, float]:
    """Per-prompt scores of N validation prompts with mean `score`: round(score * N) of them pass,
    starting at prompt `shift` (another checkpoint passing other prompts: an unpaired change)."""
    m = round(score * N)
    return {f"t{(shift + i) % N:03d}": float(i < m) for i in range(N)}


def prompts_of(evals, **changed) -> dict:
    """Each evaluation's per-prompt scores, `passing(score)` unless `changed` gives (stage, step, domain) another."""
    out = {("eval", e.stage_index, e.step_index, e.domain): passing(e.score) for e in evals}
    out.update({("eval", *k): v for k, v in changed.get("scores", {}).items()})
    return out


PROMPTS = prompts_of(EVALS)


def with_eval(evals, stage, step, domain, score):
    return [e if (e.stage_index, e.step_index, e.domain) != (stage, step, domain) else ev(stage, step, domain, score)
            for e in evals]


def test_stage_gains_hold_beyond_their_interval():
    gains = {(g.stage, g.domain): g for g in findings.stage_gains(STAGES, EVALS, PROMPTS)}
    assert (gains[("if-rl", "if")].start, gains[("if-rl", "if")].end) == (0.2, 0.6)
    ci = gains[("if-rl", "if")].interval
    assert ci.n == N and ci.estimate == 0.4 and 0.05 < ci.low < 0.4 < ci.high
    assert gains[("mcqa-rl", "mcqa")].verdict == HOLDS and ("sft", "if") not in gains


def test_a_gain_is_not_shown_within_its_noise_or_below_its_threshold_and_fails_the_wrong_way():
    """0.20 → 0.22 on other prompts: noise; 0.20 → 0.24 on the same ones: real but < 0.05; 0.20 → 0.10: a drop."""
    noisy = {(1, 1, "if"): passing(0.22, shift=5)}
    cases = [(0.22, noisy, NOT_SHOWN), (0.24, {}, NOT_SHOWN), (0.1, {}, FAILS), (0.6, {}, HOLDS)]
    for end, scores, expected in cases:
        evals = with_eval(EVALS, 1, 1, "if", end)
        gain = next(g for g in findings.stage_gains(STAGES, evals, prompts_of(evals, scores=scores)) if g.domain == "if"
                    and g.stage == "if-rl")
        assert gain.verdict == expected, (end, gain.interval)
    small = next(g for g in findings.stage_gains(STAGES, with_eval(EVALS, 1, 1, "if", 0.24),
                                                 prompts_of(with_eval(EVALS, 1, 1, "if", 0.24))) if g.stage == "if-rl")
    assert small.interval.low > 0, "significant, but by less than the claim's 0.05"


def test_without_per_prompt_scores_nothing_is_shown():
    assert {g.verdict for g in findings.stage_gains(STAGES, EVALS)} == {NOT_SHOWN}
    assert [c.verdict for c in claims(STAGES, EVALS, TEACHERS)] == [NOT_SHOWN] * 3


def test_forgetting_counts_only_beyond_its_interval():
    found = findings.forgetting(STAGES, EVALS, PROMPTS)
    lowered = [(f.domain, f.learned_in, f.lowered_by, f.level, f.lowered_to) for f in found if f.holds]
    assert lowered == [("if", "if-rl", "mcqa-rl", 0.6, 0.4)]
    assert next(f for f in found if f.holds).interval.high < -0.05
    # 0.60 → 0.58 on other prompts: lower, but within its noise - it does not count
    evals = with_eval(EVALS, 2, 1, "if", 0.58)
    evals = with_eval(evals, 3, 1, "if", 0.6)
    noisy = findings.forgetting(STAGES, evals, prompts_of(evals, scores={(2, 1, "if"): passing(0.58, shift=7)}))
    assert [f.holds for f in noisy if f.domain == "if" and f.learned_in == "if-rl"] == [False]
    assert [c.verdict for c in claims(STAGES, evals, TEACHERS, None, prompts_of(
        evals, scores={(2, 1, "if"): passing(0.58, shift=7)}))][1] == NOT_SHOWN


def test_mopd_recovery_against_the_evaluation_that_chose_the_teacher():
    rec = {r.domain: r for r in findings.mopd_recovery(STAGES, EVALS, TEACHERS, None, PROMPTS)}
    assert rec["if"].fraction == 0.57 / 0.6 and rec["mcqa"].fraction == 1.0
    assert rec["mcqa"].verdict == HOLDS and rec["mcqa"].interval.low >= 0.9, "the same prompts pass: 100 %"
    assert rec["if"].margin.n == N and rec["if"].verdict == NOT_SHOWN, "95 % of the teacher, but within its noise"
    assert rec["if"].margin.low < 0 < rec["if"].margin.high and rec["if"].interval.low < 0.9 < rec["if"].interval.high
    worse = with_eval(EVALS, 3, 1, "if", 0.4)
    assert {r.domain: r for r in findings.mopd_recovery(STAGES, worse, TEACHERS, None, prompts_of(worse))}[
        "if"].verdict == FAILS


def test_mopd_recovery_compares_the_fresh_draws_of_student_and_teacher_where_both_exist():
    """The score that chose a teacher is the best of several noisy ones; the stage's paired fresh draws are
    compared instead, and never a fresh draw with an evaluation under the other seed."""
    fresh = {3: {"teacher": {"mcqa": 0.4, "if": 0.5}, "student": {"mcqa": 0.45}}}
    drawn = {**PROMPTS, ("teacher", 3, 0, "mcqa"): passing(0.4), ("student", 3, 0, "mcqa"): passing(0.45),
             ("teacher", 3, 0, "if"): passing(0.5)}
    rec = {r.domain: r for r in findings.mopd_recovery(STAGES, EVALS, TEACHERS, fresh, drawn)}
    assert (rec["mcqa"].teacher_score, rec["mcqa"].end, rec["mcqa"].chosen_score) == (0.4, 0.45, 0.5)
    assert rec["mcqa"].fraction == 0.45 / 0.4 and rec["mcqa"].interval.estimate == 0.45 / 0.4
    assert rec["mcqa"].verdict == HOLDS
    assert (rec["if"].teacher_score, rec["if"].end, rec["if"].chosen_score) == (0.6, 0.57, None), "no student draw: as before"
    low = {3: {"teacher": {"mcqa": 0.4}, "student": {"mcqa": 0.3}}}
    low_drawn = {**PROMPTS, ("teacher", 3, 0, "mcqa"): passing(0.4), ("student", 3, 0, "mcqa"): passing(0.3)}
    assert {r.domain: r for r in findings.mopd_recovery(STAGES, EVALS, TEACHERS, low, low_drawn)}["mcqa"].verdict == FAILS
    evidence = claims(STAGES, EVALS, TEACHERS, fresh, drawn)[-1].evidence
    assert evidence.startswith("both drawn again with one fresh seed")
    assert "mcqa: 0.45 vs teacher 0.40 [0.50] (112%, interval [" in evidence and "if: 0.57 vs teacher 0.60 (95%" in evidence


def test_an_explicit_teacher_this_run_never_scored_is_named_as_such_not_as_a_teacher_at_zero():
    """`teachers: {mcqa: <a checkpoint from another run>}`: the ledger holds 0.0 as its score, which no
    evaluation drew; the claim must not read "vs teacher 0.00 (100 %)"."""
    explicit = {3: {"if": ("ckpt-1-1", 0.6), "mcqa": ("/elsewhere/v57", 0.0)}}
    rec = {r.domain: r for r in findings.mopd_recovery(STAGES, EVALS, explicit, None, PROMPTS)}
    assert not rec["mcqa"].scored and rec["mcqa"].verdict == NOT_SHOWN
    assert rec["if"].scored, "a teacher picked by an evaluation of this run"
    claim = claims(STAGES, EVALS, explicit, None, PROMPTS)[-1]
    assert claim.verdict == NOT_SHOWN
    assert "mcqa: 0.50 vs a teacher this run did not score" in claim.evidence
    assert "vs teacher 0.00" not in claim.evidence and "if: 0.57 vs teacher 0.60 (95%" in claim.evidence
    assert [f.subject for f in claim.figures] == ["if"], "no fraction of a score nobody drew"


def test_a_teacher_with_nothing_to_recover_shows_nothing():
    fresh = {3: {"teacher": {"mcqa": 0.0}, "student": {"mcqa": 0.0}}}
    drawn = {("teacher", 3, 0, "mcqa"): passing(0.0), ("student", 3, 0, "mcqa"): passing(0.0)}
    assert {r.domain: r for r in findings.mopd_recovery(STAGES, EVALS, TEACHERS, fresh, drawn)}["mcqa"].verdict == NOT_SHOWN


def test_claims_say_plainly_which_hold_which_are_not_shown_and_which_fail():
    flat = with_eval(EVALS, 1, 1, "if", 0.1)
    verdicts = {c.claim.split()[0] + " " + c.claim.split()[1]: c.verdict for c in claims(STAGES, flat, TEACHERS, None,
                                                                                       prompts_of(flat))}
    # if-rl now ends below SFT's 0.20: that is forgetting too, beyond its interval
    assert verdicts == {"each RL": FAILS, "a later": HOLDS, "MOPD brings": NOT_SHOWN}
    good = {c.claim.split()[1]: c for c in claims(STAGES, EVALS, TEACHERS, None, PROMPTS)}
    assert good["RL"].verdict == HOLDS and good["later"].verdict == HOLDS
    assert [f.subject for f in good["RL"].figures] == ["if-rl/if", "mcqa-rl/mcqa"]
    assert all(f.low is not None and f.n == N for f in good["RL"].figures)


def test_write_report_draws_pngs_and_html(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path}/ledger.sqlite")
    run = ledger.create_run("demo", {"stages": STAGES})
    for i, st in enumerate(STAGES):
        ledger.begin_stage(run, i, st["name"], st["type"], st["steps"])
        for k in range(st["steps"]):
            rec = ledger.begin_step(run, i, k)
            ledger.advance(rec.step_id, "trained", seconds=0.5)
    for e in EVALS:
        ledger.record_eval(run, e.stage_index, e.step_index, 0, e.checkpoint, e.domain, e.score, e.n, passing(e.score))
    for d, (ckpt, score) in TEACHERS[3].items():
        ledger.record_teacher(run, 3, d, ckpt, score)
    page = write_report(ledger, run, tmp_path / "report")
    text = page.read_text()
    assert "mcqa-rl" in text and "<b>holds</b>" in text and "rewards.png" in text
    assert "if-rl/if: 0.20 → 0.60 (+0.40 [+" in text, "each figure with its interval"
    for png in ("rewards.png", "step_times.png"):
        with Image.open(tmp_path / "report" / png) as img:
            assert img.size[0] > 800 and len(img.convert("RGB").getcolors(1_000_000)) > 10


def test_own_axis_takes_reward_model_and_out_of_range_domains_not_pass_rates():
    assert own_axis("rlhf", [0.2, 0.4]), "a reward-model score is not a pass rate, even inside 0..1"
    assert own_axis("workbench", [0.5, 1.7]) and own_axis("tool", [-0.1, 0.3])
    assert not own_axis("math", [0.0, 0.5, 1.0])
    assert score_limits([-2.0, 3.0]) == (-2.4, 3.4) and score_limits([1.5]) == (1.0, 2.0)


def test_mid_stage_evaluations_sit_inside_their_stage_segment():
    stages = [{"name": "sft", "type": "sft", "steps": 10}, {"name": "rl", "type": "grpo", "steps": 4}]
    evals = [ev(0, -1, "if", 0.0), ev(0, 4, "if", 0.1), ev(0, 9, "if", 0.2), ev(1, -1, "if", 0.2),
             ev(1, 1, "if", 0.3), ev(1, 3, "if", 0.4)]
    assert [x for x, _ in _timeline(stages, evals)["if"]] == [0.0, 0.5, 1.0, 1.0, 1.5, 2.0]


def test_rewards_figure_puts_rlhf_on_a_right_axis_scaled_to_its_scores():
    import matplotlib.pyplot as plt

    rm = [ev(1, -1, "rlhf", -1.8), ev(1, 0, "rlhf", 0.4), ev(1, 1, "rlhf", 2.6)]
    fig = rewards_figure(STAGES, EVALS + rm)
    try:
        assert len(fig.axes) == 2
        left, right = fig.axes
        assert left.get_ylim() == (-0.02, 1.02)
        low, high = right.get_ylim()
        assert low < -1.8 and high > 2.6 and (high - low) < 2 * (2.6 + 1.8)
        assert [line.get_label() for line in right.get_lines()] == ["rlhf: reward-model score"]
        named = {line.get_label() for line in left.get_lines()} - {""}
        assert {n for n in named if not n.startswith("_")} == {"if", "mcqa"}
        assert len(right.get_lines()[0].get_xdata()) == 3, "every evaluation is a marker"
        assert "rlhf: reward-model score" in [t.get_text() for t in left.get_legend().get_texts()]
    finally:
        plt.close(fig)
    fig = rewards_figure(STAGES, EVALS)
    try:
        assert len(fig.axes) == 1, "no right axis without a domain that needs one"
    finally:
        plt.close(fig)
