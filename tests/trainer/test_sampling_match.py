"""log pi_train is taken on the distribution the policy sampled from: the hf policy core samples at
T = 0.7 (and with top-k / top-p), the trainer core trains MOPD on those samples, and on the first
step (same weights) every token's ratio r_t = pi_train / pi_inf is 1 to 1e-5."""

from __future__ import annotations

import numpy as np
import pytest

from services.common import codec
from services.common.pb import trainer_pb2
from services.policy.backends.base import SamplingConfig
from services.policy.config import PolicyConfig
from services.policy.core import PolicyCore
from services.trainer.config import TrainerConfig
from services.trainer.core import TrainerCore
from services.trainer.distributed import Coordinator

PROMPTS = [[5, 17, 33, 2], [9, 4], [40, 41, 42, 43, 44, 45], [7]]


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    return PolicyCore.build(PolicyConfig(model=str(tiny_model_dir), max_new_tokens=64))


@pytest.fixture(scope="module")
def trainer(tiny_model_dir, tmp_path_factory):
    cfg = TrainerConfig(model=str(tiny_model_dir), store=tmp_path_factory.mktemp("store"), device="cpu", precision="fp32")
    return Coordinator(TrainerCore(cfg))


def mopd_batch(result) -> trainer_pb2.TrainBatch:
    """One row per sample: prompt + response, the response in the loss, its log pi_inf; teacher = pi_inf."""
    rows, masks, inf = [], [], []
    n = len(result.samples) // len(result.prompt_token_ids)
    for k, s in enumerate(result.samples):
        prompt = result.prompt_token_ids[k // n]
        rows.append(np.r_[prompt, s.token_ids].astype(np.int32))
        masks.append(np.r_[np.zeros(len(prompt), np.int32), np.ones(len(s.token_ids), np.int32)])
        inf.append(np.r_[np.zeros(len(prompt), np.float32), s.logprobs].astype(np.float32))
    return trainer_pb2.TrainBatch(
        input_ids=codec.encode(rows, "int32"), loss_mask=codec.encode(masks, "int32"),
        inference_logprobs=codec.encode(inf, "float32"), teacher_logprobs=codec.encode(inf, "float32"),
    )


@pytest.mark.parametrize("temperature, top_k, top_p", [(0.7, 0, 1.0), (0.7, 20, 1.0), (0.7, 0, 0.9), (0.0, 0, 1.0)])
def test_first_step_ratio_is_one(policy, trainer, temperature, top_k, top_p):
    sampling = SamplingConfig(max_tokens=12, temperature=temperature, top_k=top_k, top_p=top_p, seed=1)
    batch = mopd_batch(policy.generate(PROMPTS, 2, sampling))
    sent = trainer_pb2.LossParams(temperature=temperature, top_k=top_k, top_p=top_p)
    tag = f"{temperature}-{top_k}-{top_p}"
    got = trainer.train_step(f"match/{tag}", "mopd", batch, sent, "", 0.0).metrics  # lr 0: the weights stay
    assert got["mismatch_max"] < 1e-5, got
    assert got["window_dropped_fraction"] == 0.0 and got["truncated_fraction"] == 0.0
    if temperature not in (0.0, 1.0):  # the same samples read at T = 1 (what the trainer did before): skewed
        plain = trainer.train_step(f"plain/{tag}", "mopd", batch, trainer_pb2.LossParams(), "", 0.0).metrics
        assert plain["mismatch_max"] > 0.1, plain
