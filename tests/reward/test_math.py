"""math verifier: boxed extraction and math-verify equivalence, table-driven."""

import pytest

from services.common.errors import InvalidArgument
from services.reward.verifiers.math import extract_boxed, math_reward
from tests.reward.helpers import ctx, task


class TestExtractBoxed:
    @pytest.mark.parametrize(
        "text, boxes",
        [
            ("so \\boxed{5}.", ["5"]),
            ("\\boxed{\\frac{1}{2}} then \\boxed{3}", ["\\frac{1}{2}", "3"]),
            ("nested \\boxed{\\{1, 2\\}}", ["\\{1, 2\\}"]),
            ("\\fbox{x+1}", ["x+1"]),
            ("\\boxed 7.", ["7"]),
            ("no box here", []),
            ("unclosed \\boxed{1", []),
        ],
    )
    def test_extracts(self, text, boxes):
        assert extract_boxed(text) == boxes


class TestMathReward:
    @pytest.mark.parametrize(
        "gold, response, verdict",
        [
            ("0.5", "The answer is \\boxed{\\frac{1}{2}}", "correct"),
            ("\\frac{1}{2}", "\\boxed{0.5}", "correct"),
            ("1/2", "\\boxed{\\dfrac12}", "correct"),
            ("3", "\\boxed{3.01}", "incorrect"),  # close is not equal
            ("3", "the answer is 3", "invalid"),  # missing box
            ("x^2+2x+1", "\\boxed{(x+1)^2}", "correct"),
            ("\\sqrt{2}/2", "\\boxed{\\frac{1}{\\sqrt{2}}}", "correct"),
            ("10", "\\boxed{11}", "incorrect"),
            ("\\boxed{42}", "first \\boxed{41} finally \\boxed{42}", "correct"),  # last box by default
            ("42", "first \\boxed{42} finally \\boxed{41}", "incorrect"),
            ("(1,2)", "\\boxed{(1, 2)}", "correct"),
            ("x=3", "\\boxed{3}", "correct"),
            ("-7", "\\boxed{7}", "incorrect"),
        ],
    )
    def test_table(self, gold, response, verdict):
        out = math_reward(task("math", ground_truth=gold), response, ctx())
        assert out.verdict == verdict, out.reason
        assert out.reward == (1.0 if verdict == "correct" else 0.0)

    def test_first_box_when_configured(self):
        out = math_reward(task("math", ground_truth="42"), "\\boxed{42} no \\boxed{41}", ctx(math_last_box=False))
        assert out.verdict == "correct"

    @pytest.mark.parametrize(
        "response, verdict",
        [
            ("\\boxed{-2} and \\boxed{3}", "correct"),
            ("\\boxed{3, -2}", "correct"),
            ("\\boxed{3}", "incorrect"),  # one part of two is not enough
            ("\\boxed{3} and \\boxed{3}", "incorrect"),  # a box counts once
        ],
    )
    def test_all_parts_needed(self, response, verdict):
        out = math_reward(task("math", ground_truth=["3", "-2"]), response, ctx())
        assert out.verdict == verdict, out.reason

    def test_blank_gold_is_a_task_error(self):
        with pytest.raises(InvalidArgument, match="ground_truth"):
            math_reward(task("math", ground_truth="   "), "\\boxed{1}", ctx())
