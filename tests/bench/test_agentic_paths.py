"""bench/agentic_paths.py: the tool share and each path's reward of an env stage's evaluation episodes,
read from artefacts stored the way env_evals stores them, checked against hand-counted values."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import agentic_paths  # noqa: E402

from services.orchestrator.artifacts import ArtifactStore  # noqa: E402


def test_paths_count_tool_calls_by_turns_and_split_the_reward():
    # 2 direct answers (1 turn: one right), 3 tool episodes (2-3 turns: two right)
    p = agentic_paths.paths({"turns": [1, 1, 2, 3, 2], "rewards": [1.0, 0.0, 1.0, 0.0, 1.0]})
    assert p["episodes"] == 5 and p["reward"] == pytest.approx(0.6) and p["tool_share"] == pytest.approx(0.6)
    assert p["solved_tool"] == pytest.approx(2 / 3) and p["solved_direct"] == pytest.approx(0.5)
    assert math.isnan(agentic_paths.paths({"turns": [2], "rewards": [1.0]})["solved_direct"])


def test_the_table_lists_a_stages_evaluations_start_first(tmp_path, capsys):
    store = ArtifactStore(tmp_path / "runs" / "3" / "steps")
    store.put("evals/stage-1-step-23-episodes", "samples", {"turns": [2, 2], "rewards": [1.0, 0.0]})
    store.put("evals/stage-1-step--1-episodes", "samples", {"turns": [1, 2], "rewards": [0.0, 1.0]})
    store.put("evals/stage-0-step-9-episodes", "samples", {"turns": [1], "rewards": [0.0]})
    assert agentic_paths.main(["--home", str(tmp_path), "--run", "3", "--stage", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| start") or "after" in line]
    assert rows == ["| start | 2 | 0.50 | 0.50 | 1.00 | 0.00 |", "| after step 24 | 2 | 0.50 | 1.00 | 0.50 | - |"]
    with pytest.raises(SystemExit):
        agentic_paths.main(["--home", str(tmp_path), "--run", "3", "--stage", "2"])
