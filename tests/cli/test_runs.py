"""What `cascade resume` prints about where a run continues."""

from services.cli.runs import resume_text
from services.orchestrator.ledger import ResumePoint


def test_a_resume_point_reads_as_a_sentence_not_a_dataclass():
    assert resume_text(ResumePoint(2, 3, "generated", 7)) == "stage 2, step 3 (after generated), weight version 7"
    assert resume_text(ResumePoint(0, 0, None, None)) == "stage 0, step 0 (not begun), no published weights yet"
    assert resume_text(ResumePoint(4, 0, None, 12, finished=True)) == "the end of the cascade (weight version 12)"
