"""mcqa and long_context verifiers, table-driven."""

import pytest

from services.common.errors import InvalidArgument
from services.reward.verifiers.long_context import long_context_reward, normalize_answer
from services.reward.verifiers.mcqa import extract_choice, mcqa_reward
from tests.reward.helpers import ctx, task


class TestMcqa:
    @pytest.mark.parametrize(
        "response, choice",
        [("\\boxed{B}", "B"), ("so \\boxed{(c)}", "C"), ("Answer: D", "D"), ("The answer is **A**", "A"),
         ("I think\nB", "B"), ("Answer: A ... on reflection Answer: C", "C"), ("no idea", None),
         ("\\boxed{\\text{B}}", "B")],
    )
    def test_extract(self, response, choice):
        assert extract_choice(response) == choice

    @pytest.mark.parametrize("response, verdict", [("\\boxed{B}", "correct"), ("Answer: b", "correct"),
                                                   ("\\boxed{C}", "incorrect"), ("hmm", "invalid")])
    def test_table(self, response, verdict):
        assert mcqa_reward(task("mcqa", ground_truth="B"), response, ctx()).verdict == verdict

    @pytest.mark.parametrize(
        "response, verdict, reason",
        [("The answer is \\boxed{Paris}.", "correct", None), ("\\boxed{ paris }", "correct", None),
         ("\\boxed{\\text{Rome}}", "incorrect", "chose A"), ("\\boxed{Lyon}", "incorrect", "chose no option"),
         ("\\boxed{B}", "correct", None), ("Paris", "invalid", None)],
    )
    def test_an_option_named_by_its_text(self, response, verdict, reason):
        choices = {"A": "Rome", "B": "Paris", "C": "Oslo", "D": "Lima"}
        out = mcqa_reward(task("mcqa", ground_truth="B", choices=choices), response, ctx())
        assert out.verdict == verdict and (reason is None or reason in out.reason), out.reason

    def test_gold_must_be_a_letter(self):
        with pytest.raises(InvalidArgument, match="ground_truth"):
            mcqa_reward(task("mcqa", ground_truth="Paris"), "\\boxed{A}", ctx())


class TestLongContext:
    @pytest.mark.parametrize(
        "response, verdict",
        [("The Eiffel Tower", "correct"), ("eiffel tower.", "correct"), ("Answer: it is the Eiffel Tower!", "correct"),
         ("\\boxed{Eiffel Tower}", "correct"), ("The Eiffel", "incorrect"), ("Big Ben", "incorrect"),
         ("the Eiffel Towers", "incorrect"), ("  ", "invalid")],
    )
    def test_table(self, response, verdict):
        out = long_context_reward(task("long_context", ground_truth="Eiffel Tower"), response, ctx())
        assert out.verdict == verdict, out.reason

    def test_normalize(self):
        assert normalize_answer("  The  QUICK, brown-fox! ") == "quick brown fox"
