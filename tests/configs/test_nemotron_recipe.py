"""configs/nemotron-cascade-2.yaml carries the paper's figures (issue 20's re-check), each with its source."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.orchestrator.cascade_config import CosineSchedule, load_cascade

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "nemotron-cascade-2.yaml"

STEPS = {"if-rl": 180, "multi-domain-rl": 70, "mopd": 52, "rlhf": 25, "long-context-rl": 30, "code-rl": 22, "swe-rl": 50}


def test_stage_steps_and_rollouts_are_the_papers():
    stages = {s.name: s for s in load_cascade(RECIPE).stages}
    assert {n: stages[n].steps for n in STEPS} == STEPS
    assert (stages["code-rl"].rollouts_per_prompt, stages["swe-rl"].rollouts_per_prompt) == (64, 64)


def test_sft_is_the_papers():
    sft = load_cascade(RECIPE).stages[0]
    assert (sft.batch_size, sft.packing, sft.optimizer.lr, sft.optimizer.weight_decay) == (64, True, 5e-5, 0.1)
    assert isinstance(sft.optimizer.schedule, CosineSchedule)
    assert (sft.optimizer.schedule.warmup_steps, sft.optimizer.schedule.min_lr) == (200, pytest.approx(5e-6))


def test_every_stage_value_names_its_source():
    """Each value line of a stage carries a source tag ([paper], [paper-steps], [data] or [assumed])."""
    unsourced = []
    in_stages = False
    for n, line in enumerate(RECIPE.read_text().splitlines(), 1):
        in_stages = in_stages or line.startswith("stages:")
        text = line.split("#")[0].strip()
        structural = not text or text.endswith(":") or text.startswith(("- name:", "type:", "stages:"))
        if in_stages and not structural and not any(t in line for t in ("[paper]", "[paper-steps]", "[data]", "[assumed]")):
            unsourced.append((n, line.strip()))
    assert not unsourced, unsourced
