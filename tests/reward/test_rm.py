"""Reward-model scoring (rlhf) with the tiny model directory: real transformers, deterministic."""

import math

import pytest

from services.reward.rm import RewardModel
from services.reward.verifiers.base import Context
from services.reward.verifiers.rlhf import rlhf_reward
from tests.reward.helpers import task


@pytest.fixture(scope="module")
def rm(tiny_model_dir):
    return RewardModel(tiny_model_dir, max_length=64)


def test_scores_are_finite_batched_and_reproducible(rm, tiny_model_dir):
    pairs = [([{"role": "user", "content": "hi"}], "hello there"), ([{"role": "user", "content": "hi"}], "go away")]
    batch = rm.score(pairs)
    assert len(batch) == 2 and all(math.isfinite(x) for x in batch)
    assert batch[0] != batch[1]
    assert [rm.score([p])[0] for p in pairs] == pytest.approx(batch, abs=1e-4)  # padding does not change a score
    assert RewardModel(tiny_model_dir, max_length=64).score(pairs) == pytest.approx(batch, abs=1e-6)


def test_rlhf_verifier_returns_the_score(rm):
    out = rlhf_reward(task("rlhf"), "hello there", Context(reward_model=rm))
    assert out.verdict == "correct" and out.reward == pytest.approx(rm.score([([{"role": "user", "content": "q"}], "hello there")])[0])
    assert rlhf_reward(task("rlhf"), "  ", Context(reward_model=rm)).verdict == "invalid"


def bos_model_without_pad(src, dst):
    """A copy of the tiny model whose config names no pad token and whose tokenizer adds a BOS
    (`<|im_start|>`) when asked for special tokens, as many real base models' do."""
    import json
    import shutil

    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["pad_token_id"] = None
    (dst / "config.json").write_text(json.dumps(cfg))
    tok = json.loads((dst / "tokenizer.json").read_text())
    bos = next(t for t in tok["added_tokens"] if t["content"] == "<|im_start|>")
    tok["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": bos["content"], "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": bos["content"], "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {bos["content"]: {"id": bos["content"], "ids": [bos["id"]], "tokens": [bos["content"]]}},
    }
    (dst / "tokenizer.json").write_text(json.dumps(tok))
    return dst


def test_served_scores_are_the_trainers_scores(tiny_model_dir, tmp_path):
    """Preference pairs trained as the trainer's `bt` rows, published, then scored through the reward
    service's RewardModel: the same token ids, the same pad id, the same scores."""
    import torch

    from services.common import codec
    from services.common.modelio import load_tokenizer
    from services.common.pb import trainer_pb2
    from services.common.rm_inputs import reward_input_ids
    from services.trainer.config import TrainerConfig
    from services.trainer.core import TrainerCore
    from services.trainer.distributed import Coordinator
    from services.trainer.losses import LOSSES

    model = bos_model_without_pad(tiny_model_dir, tmp_path / "base")
    tok = load_tokenizer(model)
    assert tok("x")["input_ids"][0] != tok.encode("x", add_special_tokens=False)[0]  # the BOS is there to be missed
    prompt = [{"role": "user", "content": "Say something kind."}]
    answers = ["You are doing great, keep going!", "Go away.", "Thank you so much for asking.", "No."]
    pairs = [(prompt, a) for a in answers]
    rows = [reward_input_ids(tok, m, r, 64) for m, r in pairs]  # the training rows
    batch = trainer_pb2.TrainBatch(input_ids=codec.encode(rows, "int32"),
                                   preference_pairs=codec.encode([list(range(len(rows)))], "int32"))
    trainer = Coordinator(TrainerCore(TrainerConfig(model=str(model), model_kind="sequence_classifier",
                                                    store=tmp_path / "store", device="cpu", precision="fp32")))
    trainer.train_step("rm-0", "bt", batch, trainer_pb2.LossParams(), "", 1e-3)
    core = trainer.core
    assert core.engine.module.config.pad_token_id == tok.pad_token_id
    spec = LOSSES["bt"]
    _, decoded, params = core.prepare("rm-score", "bt", batch, trainer_pb2.LossParams())
    with torch.no_grad():
        inputs, *_ = core.engine._inputs(spec, decoded, 1.0, params)
    trained = inputs.rewards.tolist()
    published = trainer.publish_weights()

    served = RewardModel(published.uri, max_length=64)
    assert [served.input_ids(m, r) for m, r in pairs] == rows
    assert served.score(pairs) == pytest.approx(trained, abs=1e-5)
    assert [served.score([p])[0] for p in pairs] == pytest.approx(trained, abs=1e-5)  # alone or padded: the same


def test_orchestrators_preference_rows_are_the_served_ids(tiny_model_dir):
    """The reward-model stage's training rows (orchestrator) are rm_inputs' ids, token for token."""
    from services.common.modelio import load_tokenizer
    from services.common.rm_inputs import reward_input_ids
    from services.orchestrator.steps.rm import pair_rows

    class Record:
        class M:
            def __init__(self, role, content):
                self.role, self.content = role, content

            def model_dump(self, include):
                return {"role": self.role, "content": self.content}

        messages = [M("user", "hi there")]
        chosen, rejected = "hello, friend", "go away"

    tok = load_tokenizer(tiny_model_dir)
    prompt = [{"role": "user", "content": "hi there"}]
    assert pair_rows(tok, [Record()], 16) == [reward_input_ids(tok, prompt, a, 16) for a in ("hello, friend", "go away")]


def test_a_model_without_any_pad_token_is_refused():
    from services.common.errors import FailedPrecondition
    from services.common.rm_inputs import resolve_pad_id

    class NoPad:
        pad_token_id = None

    assert resolve_pad_id(3, NoPad(), "m") == 3 and resolve_pad_id(None, type("T", (), {"pad_token_id": 7})(), "m") == 7
    with pytest.raises(FailedPrecondition, match="pad token"):
        resolve_pad_id(None, NoPad(), "m")
