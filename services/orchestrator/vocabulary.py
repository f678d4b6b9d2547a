"""Teacher and student share one vocabulary: the check MOPD's token-by-token comparison needs.

MOPD's advantage is log π_teacher(y_t) − log π_train(y_t) for the student's token ids y_t, so the
teacher must read every id as the student's tokenizer wrote it: the same token strings at the same
ids, not merely the same vocabulary size (two tokenizers of one size can map ids to different
strings). `vocabulary_difference` is pure; `check_teacher_vocabulary` loads the teacher's tokenizer.
"""

from __future__ import annotations

from collections.abc import Mapping

from services.common.errors import FailedPrecondition


def vocabulary_difference(student: Mapping[str, int], teacher: Mapping[str, int], limit: int = 3) -> tuple[int, list[str]]:
    """(number of ids whose token differs, up to `limit` of them described), comparing id -> token."""
    by_id_s = {i: t for t, i in student.items()}
    by_id_t = {i: t for t, i in teacher.items()}
    differ = sorted(i for i in by_id_s.keys() | by_id_t.keys() if by_id_s.get(i) != by_id_t.get(i))
    shown = [f"id {i}: student {by_id_s.get(i)!r}, teacher {by_id_t.get(i)!r}" for i in differ[:limit]]
    return len(differ), shown


def check_teacher_vocabulary(student_tokenizer, checkpoint: str, where: str) -> None:
    """Raise FailedPrecondition naming `where` when the tokenizer at `checkpoint` maps any id to
    another token than the student's tokenizer does."""
    from services.common.modelio import load_tokenizer

    n, shown = vocabulary_difference(student_tokenizer.get_vocab(), load_tokenizer(checkpoint).get_vocab())
    if n:
        raise FailedPrecondition(
            f"{where}: the teacher at {checkpoint} has another vocabulary than the student ({n} token ids differ; "
            f"{'; '.join(shown)}); MOPD compares log-probs token by token: distil from a checkpoint with the "
            f"student's tokenizer")
