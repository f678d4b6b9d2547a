"""The shared NeMo Gym sample rows, read as they are and scored as NeMo Gym scores them: each row's
reward equals its `expect` (the gold SWE row: an `error` naming its container image); the workbench
rows are refused by `cascade reward score`, plainly, or left out with --skip-unscored."""

import json

import pytest

from services.cli.main import main
from services.common.tasks import TaskRecord, task_to_json
from services.reward.core import strip_thinking
from services.reward.verifiers import UNSCORED, VERIFIERS
from services.reward.verifiers.base import Context
from tests.common.test_nemo_gym import SAMPLES, needs_samples, sample_rows

pytestmark = needs_samples


def row_id(row: dict) -> str:
    return f"{row['subset']}:{row.get('id', row.get('uuid', row['provenance'].get('row', '')))}"


ROWS = sample_rows() if SAMPLES.exists() else []
SCORED = [r for r in ROWS if TaskRecord.parse({k: v for k, v in r.items() if k != "response"}).domain not in UNSCORED]


@pytest.mark.parametrize("row", SCORED, ids=[row_id(r) for r in SCORED])
def test_each_row_scores_what_nemo_gym_gives(row):
    rec = TaskRecord.parse({k: v for k, v in row.items() if k != "response"})
    assert TaskRecord.from_json(task_to_json(rec)) == rec  # the wire form the orchestrator sends is the same task
    out = VERIFIERS[rec.domain].fn(rec, strip_thinking(row["response"]), Context())
    if rec.domain == "swe" and row["expect"] == 1.0:  # the gold patch: its tests need the image
        assert out.verdict == "error" and row["metadata"]["image"] in out.reason
    else:
        assert out.reward == row["expect"], out.reason


def test_cascade_reward_score_on_the_shared_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CASCADE_REWARD_VERIFY_WORKERS", "1")
    monkeypatch.setenv("CASCADE_REWARD_SANDBOX_WORKERS", "1")
    monkeypatch.setenv("CASCADE_REWARD_SANDBOX_BASE_UID", "62500")
    with pytest.raises(SystemExit) as refused:
        main(["reward", "score", "-i", str(SAMPLES)])
    err = capsys.readouterr().err
    assert refused.value.code == 1 and f"{SAMPLES}:8: domain" in err and "workbench" in err and "multi-turn" in err
    out = tmp_path / "scores.jsonl"
    main(["reward", "score", "-i", str(SAMPLES), "-o", str(out), "--skip-unscored"])
    assert "skipped 3 row(s) not scored here (lines 8, 9, 10)" in capsys.readouterr().err
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(results) == len(SCORED) == 14
    for row, got in zip(SCORED, results):
        if row["subset"] == "SWE-RL" and row["expect"] == 1.0:
            assert got["verdict"] == "error" and row["metadata"]["image"] in got["reason"]
        else:
            assert got["reward"] == row["expect"], (row_id(row), got)
