"""bench/shared_prompts.py's pieces: a stored rollout batch becomes prompt + completion rows that the
trainer decodes and lays out with one copy of each prompt; the stored batches of a stage are found
by step id."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import shared_prompts  # noqa: E402

from services.common.pb import trainer_pb2  # noqa: E402
from services.orchestrator.artifacts import ArtifactStore  # noqa: E402
from services.trainer.batch import decode_batch, decode_params, lookup_loss  # noqa: E402
from services.trainer.sharing import share_prompts  # noqa: E402

OUT = {"prompt_ids": [[5, 6, 7], [8, 9]],
       "token_ids": [[11, 12], [13], [14, 15, 16], [17, 18]],
       "logprobs": [[-0.5, -1.0], [-0.1], [-2.0, -0.3, -0.2], [-0.4, -0.6]]}


def test_rollout_rows_put_each_completion_after_its_prompt():
    for loss in ("grpo", "mopd"):
        spec = lookup_loss(loss)
        msg = shared_prompts.rollout_batch(OUT, loss, np.random.default_rng(0))
        b = decode_batch(msg, spec, decode_params(trainer_pb2.LossParams(), spec), 100, 64, 0)
        assert b.input_ids[1, :4].tolist() == [5, 6, 7, 13] and b.input_ids[2, :5].tolist() == [8, 9, 14, 15, 16]
        assert b.loss_mask[0].tolist() == [0, 0, 0, 1, 1] and b.loss_mask[1, :4].tolist() == [0, 0, 0, 1]
        assert b.inference_logprobs[2, 2:5].tolist() == np.float32([-2.0, -0.3, -0.2]).tolist()
        layout = share_prompts(b.input_ids, b.attention_mask, b.loss_mask, 512, 0)
        assert layout.rows == 2 and layout.input_ids[0, :6].tolist() == [5, 6, 7, 11, 12, 13]


def test_stored_batches_are_read_in_step_order(tmp_path):
    store = ArtifactStore(tmp_path / "runs" / "3" / "steps")
    for step in (0, 2):
        store.put(f"run-3/stage-1/step-{step}", "rollouts", {**OUT, "step": step})
    store.put("run-3/stage-2/step-1", "rollouts", OUT)
    assert [b["step"] for b in shared_prompts.stored_batches(tmp_path, 3, 1, 5)] == [0, 2]
