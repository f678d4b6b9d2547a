"""Prompt sharing (services/trainer/sharing.py): the layout groups rows by prompt, continues positions
and masks each completion to the prompt and itself; on the real tiny model the shared batch has the
unshared batch's log-probs, loss and gradients, and a layout that lets completions see each other
does not (the comparison can fail); the trainer takes `share_prompts` for grpo and mopd only."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from services.common import codec
from services.common.errors import InvalidArgument
from services.common.pb import trainer_pb2
from services.trainer.batch import decode_batch, decode_params, lookup_loss
from services.trainer.config import TrainerConfig
from services.trainer.core import StepOptions, TrainerCore
from services.trainer.distributed import Coordinator
from services.trainer.engine import causal_logprobs, shared_logprobs
from services.trainer.losses import LossInputs
from services.trainer.sharing import PAD, PROMPT, SharedLayout, plan_shared_rows, share_prompts
from tests.trainer.builders import batch, request_batch


def group_rows(seed: int = 3, vocab: int = 1000) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Rows 0-3: one 6-token prompt, 4 completions (row 2 a multi-turn episode: a tool result out of
    the loss inside it); rows 4-6: another prompt of 4 tokens; row 7: a prompt of its own."""
    rng = np.random.default_rng(seed)
    p1, p2, p3 = (rng.integers(1, vocab, size=n).astype(np.int32) for n in (6, 4, 5))
    rows, masks = [], []
    for prompt, sizes in ((p1, (5, 9, 12, 3)), (p2, (7, 2, 6)), (p3, (4,))):
        for n in sizes:
            rows.append(np.r_[prompt, rng.integers(1, vocab, size=n).astype(np.int32)])
            masks.append(np.r_[np.zeros(len(prompt), np.int32), np.ones(n, np.int32)])
    masks[2][6 + 4:6 + 7] = 0  # a tool's reply in the middle of row 2's completion
    return rows, masks


def grpo_message(seed: int = 3) -> trainer_pb2.TrainBatch:
    rows, masks = group_rows(seed)
    adv = np.random.default_rng(seed + 7).normal(size=len(rows))
    return batch(rows, masks, advantages=codec.encode([adv], "float32"), inference_logprobs=-6.9)


def decoded(seed: int = 3):
    spec = lookup_loss("grpo")
    params = decode_params(trainer_pb2.LossParams(), spec)
    return decode_batch(grpo_message(seed), spec, params, 1000, 64, 0), spec, params


def test_plan_shared_rows_fills_each_row_up_to_the_budget():
    assert plan_shared_rows(6, [5, 9, 12, 3], 40) == [[0, 1, 2, 3]]
    assert plan_shared_rows(6, [5, 9, 12, 3], 20) == [[0, 1], [2], [3]]
    assert plan_shared_rows(6, [5, 9, 12, 3], 0) == [[0], [1], [2], [3]]  # 0: as wide as prompt + longest


def test_layout_groups_rows_by_prompt_and_continues_positions():
    b, _, _ = decoded()
    layout = share_prompts(b.input_ids, b.attention_mask, b.loss_mask, 64, pad_id=0)
    assert layout.rows == 3 and layout.width == 6 + 5 + 9 + 12 + 3
    row = layout.segments[0].tolist()
    assert row == [PROMPT] * 6 + [1] * 5 + [2] * 9 + [3] * 12 + [4] * 3
    assert layout.position_ids[0, :11].tolist() == list(range(11))
    assert layout.position_ids[0, 11:20].tolist() == list(range(6, 15))  # completion 2 continues the prompt
    assert torch.equal(layout.input_ids[0, 20:32], b.input_ids[2, 6:18])
    assert layout.segments[2].tolist()[:9] == [PROMPT] * 5 + [1] * 4 and set(layout.segments[2, 9:].tolist()) == {PAD}
    assert int(layout.want.sum()) == int((b.loss_mask > 0).sum())  # the tool reply is not predicted
    # every wanted token's predictor holds the token just before it in its own row
    r, t = layout.want.nonzero(as_tuple=True)
    assert torch.equal(layout.input_ids.reshape(-1)[layout.predictor], b.input_ids[r, t - 1])


def test_no_layout_when_no_prompt_repeats():
    b, _, _ = decoded()
    one_each = [0, 4, 7]
    assert share_prompts(b.input_ids[one_each], b.attention_mask[one_each], b.loss_mask[one_each], 64, 0) is None
    assert share_prompts(b.input_ids, b.attention_mask, b.loss_mask, 0, 0) is None  # budget 0: one completion a row


def test_attention_mask_keeps_completions_apart():
    seg = torch.tensor([[PROMPT, PROMPT, 1, 1, 2, 2, PAD]])
    layout = SharedLayout(seg.clone(), seg.clone(), seg, torch.zeros(1, 1, dtype=torch.bool), torch.zeros(0, dtype=torch.long))
    allowed = layout.attention_mask(torch.float32)[0, 0] == 0
    assert allowed[4].tolist() == [True, True, False, False, True, False, False]  # completion 2 skips completion 1
    assert allowed[3].tolist() == [True, True, True, True, False, False, False]  # causal in its own segment
    assert allowed[1].tolist() == [True, True, False, False, False, False, False]
    assert allowed[6].tolist() == [False] * 6 + [True]  # padding sees itself only


def loss_and_grads(model, b, spec, params, layout=None):
    model.zero_grad(set_to_none=True)
    if layout is None:
        logprobs, _, _ = causal_logprobs(model, b.input_ids, b.attention_mask, None, b.loss_mask, params)
    else:
        logprobs, _, _ = shared_logprobs(model, layout, b.input_ids, params)
    inputs = LossInputs(mask=b.loss_mask, logprobs=logprobs, advantages=b.advantages, inference_logprobs=b.inference_logprobs,
                        denominator=float(b.rows))
    out = spec.fn(inputs, params)
    out.loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logprobs.detach(), float(out.loss.detach()), grads


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32).train()


def test_shared_logprobs_loss_and_gradients_are_the_unshared(model):
    b, spec, params = decoded()
    layout = share_prompts(b.input_ids, b.attention_mask, b.loss_mask, 64, pad_id=0)
    lp, loss, grads = loss_and_grads(model, b, spec, params)
    slp, sloss, sgrads = loss_and_grads(model, b, spec, params, layout)
    on = b.loss_mask > 0
    torch.testing.assert_close(slp[on], lp[on], rtol=1e-5, atol=1e-5)
    assert sloss == pytest.approx(loss, rel=1e-5, abs=1e-7)
    assert grads.keys() == sgrads.keys() and grads
    for name in grads:
        torch.testing.assert_close(sgrads[name], grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_a_layout_that_lets_completions_see_each_other_differs(model):
    from dataclasses import replace

    b, spec, params = decoded()
    layout = share_prompts(b.input_ids, b.attention_mask, b.loss_mask, 64, pad_id=0)
    leaky = replace(layout, segments=torch.where(layout.segments > 0, 1, layout.segments))  # one segment: all completions
    lp, _, _ = loss_and_grads(model, b, spec, params, layout)
    llp, _, _ = loss_and_grads(model, b, spec, params, leaky)
    later = (b.loss_mask > 0).clone()
    later[[0, 4, 7]] = False  # each prompt's first completion sees the prompt and itself either way
    assert (llp[later] - lp[later]).abs().max() > 1e-3
    torch.testing.assert_close(llp[0], lp[0], rtol=1e-5, atol=1e-5)


def interleaved_groups(prompts: int = 8, completions: int = 16, seed: int = 5, vocab: int = 1000):
    """`prompts` prompts of 6 tokens with `completions` completions of 4-12 tokens each, the rows
    interleaved (row i continues prompt i % prompts): every prompt's last hidden state predicts the
    first token of completions spread over the whole batch."""
    rng = np.random.default_rng(seed)
    heads = [rng.integers(1, vocab, size=6).astype(np.int32) for _ in range(prompts)]
    rows, masks = [], []
    for i in range(prompts * completions):
        n = int(rng.integers(4, 13))
        rows.append(np.r_[heads[i % prompts], rng.integers(1, vocab, size=n).astype(np.int32)])
        masks.append(np.r_[np.zeros(6, np.int32), np.ones(n, np.int32)])
    adv = rng.normal(size=len(rows))
    return batch(rows, masks, advantages=codec.encode([adv], "float32"), inference_logprobs=-6.9)


def test_shared_gradients_repeat_bit_for_bit_on_two_threads(model):
    """A prompt's last hidden state predicts the first token of each of its completions, so the
    gather of predicting states repeats it; its backward must add those gradients in one order.
    (Advanced indexing's backward adds them with atomics from every thread: the sums, and a run's
    weights, then changed from run to run, more often on a loaded machine.)"""
    spec = lookup_loss("grpo")
    params = decode_params(trainer_pb2.LossParams(), spec)
    b = decode_batch(interleaved_groups(), spec, params, 1000, 64, 0)
    layout = share_prompts(b.input_ids, b.attention_mask, b.loss_mask, 512, pad_id=0)
    assert len(layout.predictor) > layout.predictor.unique().numel()  # predictors repeat
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        digests = set()
        for _ in range(12):
            _, _, grads = loss_and_grads(model, b, spec, params, layout)
            digests.add(hash(b"".join(grads[n].numpy().tobytes() for n in sorted(grads))))
    finally:
        torch.set_num_threads(before)
    assert len(digests) == 1


@pytest.fixture(scope="module")
def trainer(tiny_model_dir, tmp_path_factory):
    cfg = TrainerConfig(model=str(tiny_model_dir), store=tmp_path_factory.mktemp("store"), device="cpu", precision="fp32")
    return Coordinator(TrainerCore(cfg))


@pytest.mark.parametrize("loss", ["grpo", "mopd"])
def test_train_step_with_shared_prompts(trainer, loss):
    rows, masks = group_rows()
    adv = codec.encode([np.random.default_rng(9).normal(size=len(rows))], "float32")
    msg = batch(rows, masks, advantages=adv, inference_logprobs=-6.9) if loss == "grpo" else \
        batch(rows, masks, inference_logprobs=-6.9, teacher_logprobs=-4.0)
    plain = trainer.train_step(f"share/{loss}/plain", loss, msg, trainer_pb2.LossParams(), "", 0.0).metrics
    shared = trainer.train_step(f"share/{loss}/shared", loss, msg, trainer_pb2.LossParams(), "", 0.0,
                                options=StepOptions(share_prompts=True)).metrics
    assert shared["loss"] == pytest.approx(plain["loss"], rel=1e-5, abs=1e-7) and shared["tokens"] == plain["tokens"]
    assert shared["grad_norm"] == pytest.approx(plain["grad_norm"], rel=1e-4)
    assert shared["entropy"] == pytest.approx(plain["entropy"], rel=1e-5)
    assert plain["decoder_tokens"] == len(rows) * max(len(r) for r in rows)
    assert shared["decoder_tokens"] == 3 * (6 + 5 + 9 + 12 + 3) < plain["decoder_tokens"]


def test_share_prompts_is_refused_for_other_losses(trainer):
    with pytest.raises(InvalidArgument) as err:
        trainer.train_step("share/sft", "sft", request_batch("sft"), trainer_pb2.LossParams(), "",
                           options=StepOptions(share_prompts=True))
    assert err.value.field == "share_prompts"


def test_share_tokens_bounds_a_shared_row(tiny_model_dir, tmp_path):
    cfg = TrainerConfig(model=str(tiny_model_dir), store=tmp_path, device="cpu", precision="fp32", share_tokens=20)
    narrow = Coordinator(TrainerCore(cfg))
    rows, masks = group_rows()
    msg = batch(rows, masks, advantages=codec.encode([np.ones(len(rows))], "float32"), inference_logprobs=-6.9)
    metrics = narrow.train_step("narrow", "grpo", msg, trainer_pb2.LossParams(), "", 0.0,
                                options=StepOptions(share_prompts=True)).metrics
    # prompt 6 + (5, 9 | 12 | 3), prompt 4 + (7, 2, 6), prompt 5 + 4: five rows, the widest 20 tokens
    assert metrics["decoder_tokens"] == 5 * 20
