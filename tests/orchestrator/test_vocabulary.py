"""The teacher/student vocabulary check compares the id -> token maps, not their sizes."""

from __future__ import annotations

import shutil

import pytest

from services.common.errors import FailedPrecondition
from services.orchestrator.vocabulary import check_teacher_vocabulary, vocabulary_difference


def test_one_vocabulary_has_no_difference():
    assert vocabulary_difference({"a": 0, "b": 1}, {"b": 1, "a": 0}) == (0, [])


def test_same_size_other_tokens_differ():
    n, shown = vocabulary_difference({"a": 0, "b": 1, "c": 2}, {"a": 0, "c": 1, "b": 2})
    assert n == 2 and shown == ["id 1: student 'b', teacher 'c'", "id 2: student 'c', teacher 'b'"]


def test_a_missing_id_is_a_difference_and_the_list_is_cut():
    n, shown = vocabulary_difference({str(i): i for i in range(10)}, {"0": 0}, limit=2)
    assert n == 9 and len(shown) == 2 and shown[0] == "id 1: student '1', teacher None"


def test_a_checkpoint_with_another_tokenizer_is_refused(tiny_model_dir, tmp_path):
    from services.common.modelio import load_tokenizer

    student = load_tokenizer(tiny_model_dir)
    check_teacher_vocabulary(student, str(tiny_model_dir), "stages[1].teachers")  # its own: no error
    other = tmp_path / "other"
    shutil.copytree(tiny_model_dir, other)
    vocab = student.get_vocab()
    a, b = sorted(vocab, key=vocab.get)[-2:]  # swap the last two tokens' ids: same size, other vocabulary
    path = other / "tokenizer.json"
    path.write_text(path.read_text().replace(f'"{a}":', '"\\u0000A":').replace(f'"{b}":', f'"{a}":')
                    .replace('"\\u0000A":', f'"{b}":'))
    with pytest.raises(FailedPrecondition, match=r"stages\[1\].teachers: the teacher at .* has another vocabulary"):
        check_teacher_vocabulary(student, str(other), "stages[1].teachers")
