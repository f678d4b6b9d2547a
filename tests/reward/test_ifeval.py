"""if verifier: all 25 IFEval instruction checks (follows / violates), strict vs loose, rewards."""

import pytest

from services.common.errors import InvalidArgument
from services.reward.verifiers.ifeval import follows, if_reward
from services.reward.verifiers.ifeval_checks import IFEVAL_IDS, count_sentences, count_words
from tests.reward.helpers import ctx, task

EN = "The quick brown fox jumps over the lazy dog while the sun sets slowly behind the hills"

# (instruction id, kwargs, a response that follows it, a response that violates it)
CASES = [
    ("keywords:existence", {"keywords": ["fox", "dog"]}, "A fox met a Dog.", "A fox met a cat."),
    ("keywords:frequency", {"keyword": "cat", "frequency": 2, "relation": "at least"}, "cat CAT", "one cat"),
    ("keywords:frequency", {"keyword": "cat", "frequency": 2, "relation": "less than"}, "one cat", "cat cat"),
    ("keywords:forbidden_words", {"forbidden_words": ["bad"]}, "a badge is fine", "this is Bad."),
    ("keywords:letter_frequency", {"letter": "z", "let_frequency": 3, "let_relation": "at least"}, "zzZ", "zz"),
    ("language:response_language", {"language": "fr"},
     "Bonjour, je suis très content de vous voir aujourd'hui dans cette belle ville.", EN),
    ("length_constraints:number_sentences", {"num_sentences": 3, "relation": "less than"}, "One. Two.", "One. Two. Three."),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "first\n***\nsecond", "first\n***\n***\nthird"),
    ("length_constraints:number_words", {"num_words": 5, "relation": "at least"}, "one two three four five", "one two"),
    ("length_constraints:nth_paragraph_first_word", {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
     "First part.\n\nThen, the rest.", "First part.\n\nAfter that, the rest."),
    ("detectable_content:number_placeholders", {"num_placeholders": 2}, "Dear [name], at [address]", "Dear [name]"),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Hi.\nP.S. bye", "Hi. bye"),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "* a\n* b", "* a\n* b\n- c"),
    ("detectable_format:constrained_response", {}, "My answer is yes.", "Yes"),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2}, "*one* and **two**", "*one* only"),
    ("detectable_format:multiple_sections", {"section_spliter": "Section", "num_sections": 2},
     "Section 1\nA\nSection 2\nB", "Section 1\nA"),
    ("detectable_format:json_format", {}, '```json\n{"a": 1}\n```', "{a: 1}"),
    ("detectable_format:title", {}, "<<My Title>>\ntext", "My Title\ntext"),
    ("combination:two_responses", {}, "first answer\n******\nsecond answer", "same\n******\nsame"),
    ("combination:repeat_prompt", {"prompt_to_repeat": "Say hi."}, "Say hi. Hi!", "Hi! Say hi."),
    ("startend:end_checker", {"end_phrase": "Any questions?"}, "Done. Any questions?", "Any questions? Done."),
    ("change_case:capital_word_frequency", {"capital_frequency": 2, "capital_relation": "at least"},
     "THIS is VERY good", "This is Very good"),
    ("change_case:english_capital", {}, EN.upper(), EN),
    ("change_case:english_lowercase", {}, EN.lower(), EN),
    ("punctuation:no_comma", {}, "no commas here", "yes, a comma"),
    ("startend:quotation", {}, '"wrapped in quotes"', '"only at the start'),
]


def test_every_ifeval_instruction_is_covered():
    assert len(IFEVAL_IDS) == 25
    assert {c[0] for c in CASES} == IFEVAL_IDS


@pytest.mark.parametrize("iid, kwargs, good, bad", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_follows_and_violates(iid, kwargs, good, bad):
    assert follows(good, iid, kwargs, "strict"), good
    assert not follows(bad, iid, kwargs, "strict"), bad


class TestSplitting:
    @pytest.mark.parametrize("text, n", [("One. Two! Three?", 3), ("Dr. Smith left at 3.5 p.m. today.", 1),
                                         ("Hi. No. J. R. Tolkien wrote it.", 3), ("", 0), ("no end", 1)])
    def test_sentences(self, text, n):
        assert count_sentences(text) == n

    def test_words(self):
        assert count_words("it's a well-known fact, 42 times") == 8


class TestModesAndReward:
    def test_loose_forgives_a_markdown_wrapper(self):
        response = "**Sure**\n\"quoted answer\"\nthanks"
        assert not follows(response, "startend:quotation", {}, "strict")
        assert follows(response, "startend:quotation", {}, "loose")

    def test_all_or_nothing_by_default(self):
        t = task("if", instruction_id_list=["punctuation:no_comma", "keywords:existence"],
                 kwargs=[{}, {"keywords": ["fox"]}])
        assert if_reward(t, "a fox here", ctx()).reward == 1.0
        out = if_reward(t, "a dog, here", ctx())
        assert (out.verdict, out.reward) == ("incorrect", 0.0)
        half = if_reward(t, "a fox, here", ctx(if_reward="fraction"))
        assert (half.verdict, half.reward) == ("incorrect", 0.5)
        assert [c.passed for c in half.checks] == [False, True]

    def test_loose_mode_decides_when_configured(self):
        t = task("if", instruction_id_list=["startend:quotation"], kwargs=[{}])
        response = "Here:\n\"quoted\""
        assert if_reward(t, response, ctx()).verdict == "incorrect"
        assert if_reward(t, response, ctx(if_mode="loose")).verdict == "correct"

    def test_empty_response_is_invalid(self):
        t = task("if", instruction_id_list=["punctuation:no_comma"], kwargs=[{}])
        assert if_reward(t, "   ", ctx()).verdict == "invalid"

    def test_unset_kwargs_are_ignored_like_nvidia_data(self):
        t = task("if", instruction_id_list=["keywords:existence"], kwargs=[{"keywords": ["a"], "num_words": None}])
        assert if_reward(t, "a b", ctx()).verdict == "correct"

    @pytest.mark.parametrize(
        "ids, kwargs, field",
        [
            (["nope:unknown"], [{}], "instruction_id_list[0]"),
            (["keywords:existence"], [{}], "kwargs[0].keywords"),
            (["length_constraints:number_words"], [{"num_words": 3, "relation": "about"}], "kwargs[0].relation"),
        ],
    )
    def test_bad_task_names_the_field(self, ids, kwargs, field):
        with pytest.raises(InvalidArgument) as err:
            if_reward(task("if", instruction_id_list=ids, kwargs=kwargs), "text", ctx())
        assert err.value.field == field
