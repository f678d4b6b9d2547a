"""IF-RL's instruction checks beyond IFEval's 25 (verifiable-instructions, as NeMo Gym scores them):
one response that follows and one that violates each id; with IFEval's table, every id of the data."""

import pytest

from services.reward.verifiers.ifeval import follows, if_reward
from services.reward.verifiers.ifeval_checks import CHECKS, IFEVAL_IDS
from services.reward.verifiers.verifiable_checks import split_sentences, tokenize
from tests.reward.helpers import ctx, task
from tests.reward.test_ifeval import CASES as IFEVAL_CASES

PROMPT = "Write a haiku about rain."

# (instruction id, kwargs, a response that follows it, a response that violates it)
CASES = [
    ("paragraphs:paragraphs", {}, "<<T>>\n\nfirst\n\n***\n\nsecond", "first\n***\nsecond\n***\nthird"),
    ("paragraphs:paragraphs2", {}, "first part\n\nsecond part", "one\n\ntwo\n\nthree"),
    ("first_word:first_word_sent", {"first_word": "relationship"},
     "Relationship first. Relationship second!", "Relationship first. Then second."),
    ("first_word:first_word_answer", {"first_word": "hello"}, "Hello there, friend.", "Well, hello."),
    ("last_word:last_word_sent", {"last_word": "now"}, "Go now. Come back now!", "Go now. Come back later."),
    ("last_word:last_word_answer", {"last_word": "contest"}, "It was the only contest.", "The contest was over."),
    ("copy:repeat_phrase", {"phrase": "the quick brown fox", "small_n": 2},
     "the slow brown fox and the quick red fox", "the quick brown fox and the quick brown fox"),
    ("copy:copy", {"prompt_to_repeat": PROMPT}, "  write a haiku about rain.", "Rain falls softly."),
    ("copy:copying_simple", {"prompt_to_repeat": PROMPT}, PROMPT, "Sure! " + PROMPT),
    ("copy:copying_multiple", {"prompt_to_repeat": PROMPT, "N": 2}, f"{PROMPT}\n******\n{PROMPT}", PROMPT),
    ("new:copy_span_idx", {"prompt_to_repeat": PROMPT, "n_start": 8, "n_end": 15}, "haiku a", PROMPT),
    ("detectable_format:sentence_hyphens", {}, "I came.-I saw.-I won.", "I came. - I saw."),
    ("detectable_format:square_brackets", {}, "[every] [word] [here]", "[every] word [here]"),
    ("detectable_format:bigram_wrapping", {}, "<<I am>> <<at home>>", "<<I am>> at home"),
    ("keywords:no_adjacent_consecutive", {}, "a cat eats", "a big cat"),
    ("keywords:word_once", {"keyword": "rain"}, "The Rain fell.", "rain, rain, go away"),
    ("keywords:word_count_different_numbers", {"keyword": "sun", "frequency": 2, "relation": "at least"},
     "sun and SUN", "one sun"),
    ("keywords:exclude_word_harder", {"keyword": "very"}, "Very good indeed.", "it is very good"),
    ("count:count_increment_word", {"keyword1": "cat", "keyword2": "dog"}, "a cat, a dog, a dog", "a cat and a dog"),
    ("keywords:palindrome", {}, "we saw a racecar", "no such words here"),
    ("keywords:keyword_specific_position", {"keyword": "blue", "n": 2, "m": 3},
     "Hello there. The sky blue today.", "Hello there. The blue sky."),
    ("keywords:start_end", {}, "Rain falls on the rain", "Rain falls on the rain."),
    ("punctuation:punctuation_dot", {}, "no dots at all", "a dot."),
    ("punctuation:punctuation_exclamation", {}, "calm words.", "wow!"),
    ("count:lowercase_counting", {"N": 2}, "One two Three", "one two three"),
    ("letters:letter_counting", {"N": 10, "relation": "less than"}, "short", "much longer text"),
    ("letters:letter_counting2", {"letter": "z", "let_frequency": 2, "let_relation": "at least"}, "zoo zebra", "zoo"),
    ("count:counting_composition", {"n_sent": 1, "n_words": 3},
     "Cats are cute ***\nDogs bark loudly ***\nBirds sing songs", "Cats are cute ***\nDogs bark ***\nBirds sing songs"),
    ("count:count_unique", {}, "every word differs here", "the cat saw the dog"),
]


def test_ifeval_and_if_rl_tables_cover_every_instruction_id():
    ours = {c[0] for c in CASES}
    assert not ours & IFEVAL_IDS
    assert ours | {c[0] for c in IFEVAL_CASES} == set(CHECKS)
    assert len(CHECKS) == 54  # IFEval's 25 + verifiable-instructions' 29


@pytest.mark.parametrize(("iid", "kwargs", "good", "bad"), CASES, ids=[c[0] for c in CASES])
def test_follows_and_violates(iid, kwargs, good, bad):
    assert follows(good, iid, kwargs, "strict"), "should follow"
    assert not follows(bad, iid, kwargs, "strict"), "should violate"


class TestSplitting:
    @pytest.mark.parametrize(
        ("text", "sentences"),
        [
            ("Dr. Smith came. He left!", ["Dr. Smith came.", "He left!"]),
            ("Pi is 3.14 today. Visit example.com now?", ["Pi is 3.14 today.", "Visit example.com now?"]),
            ("Wait... what", ["Wait...", "what"]),
            ('He said "go." Then left', ['He said "go."', "Then left"]),
            ("The U.S. is big. J. Doe", ["The U.S. is big.", "J. Doe"]),
        ],
    )
    def test_sentences(self, text, sentences):
        assert split_sentences(text) == sentences

    def test_tokens(self):
        assert tokenize("Don't stop, well-known 3.5!") == ["Do", "n't", "stop", ",", "well-known", "3.5", "!"]


def test_null_kwargs_and_fraction_grading_of_a_nemo_gym_row():
    rec = task("if", instruction_id_list=["punctuation:punctuation_dot", "paragraphs:paragraphs"], kwargs=[None, {}])
    assert if_reward(rec, "one\n***\ntwo", ctx()).reward == 1.0
    fraction = task("if", instruction_id_list=["punctuation:punctuation_dot", "paragraphs:paragraphs"],
                    kwargs=[None, None], grading_mode="fraction")
    assert if_reward(fraction, "one.\n***\ntwo", ctx()).reward == 0.5
