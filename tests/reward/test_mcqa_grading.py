"""NeMo Gym's MCQA grading modes: what each reads as the chosen letter, and the reward of a NeMo Gym row."""

import pytest

from services.reward.verifiers.mcqa import mcqa_reward
from services.reward.verifiers.mcqa_grading import GRADERS, last_boxed
from tests.reward.helpers import ctx, task

OPTIONS = {"A": "Paris", "B": "Lyon", "C": "Nice", "D": "Nice harbour"}

# (grading mode, response, letter read or None)
CASES = [
    ("strict_single_letter_boxed", "so \\boxed{B}", "B"),
    ("strict_single_letter_boxed", "\\boxed{\\text{(C)}}", "C"),
    ("strict_single_letter_boxed", "\\boxed{A: Paris}", "A"),
    ("strict_single_letter_boxed", "\\boxed{A} then \\boxed{B}", "B"),
    ("strict_single_letter_boxed", "Answer: B", None),
    ("strict_single_letter_boxed", "\\boxed{Paris}", None),
    ("strict_single_letter_boxed", "\\boxed{E}", None),
    ("lenient_boxed", "\\boxed{Paris}", "A"),
    ("lenient_boxed", "\\boxed{the Nice harbour}", None),  # two options' texts are inside: none chosen
    ("lenient_boxed", "\\boxed{B}", "B"),
    ("lenient_answer_colon", "Answer: c", "C"),
    ("lenient_answer_colon", "Answer: lyon", "B"),
    ("lenient_answer_colon", "\\boxed{B}", None),
    ("lenient_answer_colon_md", "**Answer:** B because", "B"),
    ("lenient_answer_colon_md", "Answer: A or B", None),
    ("lenient_answer_colon_md", "Answer: Ｃ", "C"),
]


@pytest.mark.parametrize(("mode", "response", "letter"), CASES)
def test_each_mode_reads_its_letter(mode, response, letter):
    assert GRADERS[mode](response, OPTIONS) == letter


def test_last_boxed_counts_braces():
    assert last_boxed("\\boxed{x} \\boxed{\\text{E}}") == "\\text{E}"
    assert last_boxed("\\boxed{open") is None


def nemo_row(mode=None):
    return task("mcqa", options=[{k: v} for k, v in OPTIONS.items()], expected_answer="B",
                responses_create_params={"input": "q"}, **({"grading_mode": mode} if mode else {}))


class TestNemoGymRow:
    def test_strict_by_default(self):
        assert mcqa_reward(nemo_row(), "\\boxed{B}", ctx()).reward == 1.0
        assert mcqa_reward(nemo_row(), "Answer: B", ctx()).reward == 0.0  # our own rows would take it

    def test_wrong_letter_and_mode_from_the_row(self):
        assert mcqa_reward(nemo_row(), "\\boxed{A}", ctx()).verdict == "incorrect"
        assert mcqa_reward(nemo_row("lenient_answer_colon"), "Answer: Lyon", ctx()).reward == 1.0

    def test_our_own_records_keep_their_looser_rule(self):
        ours = task("mcqa", ground_truth="B", choices=OPTIONS)
        assert mcqa_reward(ours, "Answer: B", ctx()).reward == 1.0


def test_a_rows_own_answer_pattern_comes_first():
    row = task("mcqa", options=[{k: v} for k, v in OPTIONS.items()], expected_answer="B",
               responses_create_params={"input": "q"}, template_metadata={"output_regex": [r"Final: (\w+)"]})
    assert mcqa_reward(row, "Final: A ... Final: Lyon", ctx()).reward == 1.0  # last match, option text
    assert mcqa_reward(row, "no pattern here \\boxed{B}", ctx()).reward == 1.0  # falls back to the mode
