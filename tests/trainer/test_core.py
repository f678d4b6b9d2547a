"""TrainerCore on the real tiny model and a real DeepSpeed engine (CPU, gloo, one rank):
exact resume, exactly-once, micro-batching, publishing, the reward-model path."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from services.common.checksum import sha256_dir, verify_dir
from services.common.errors import InvalidArgument
from services.common.modelio import load_causal_lm, load_tokenizer
from services.common.pb import trainer_pb2
from services.trainer.config import TrainerConfig
from services.trainer.core import TrainerCore
from services.trainer.distributed import Coordinator
from services.trainer.schedules import ScheduleConfig
from tests.trainer.builders import adam_steps, request_batch

WARMUP = ScheduleConfig(name="linear_warmup", lr=1e-3, warmup_start_lr=1e-4, warmup_steps=4)
NO_PARAMS = trainer_pb2.LossParams()


def make(model_dir, store, **kw) -> Coordinator:
    kw.setdefault("schedule", WARMUP)
    return Coordinator(TrainerCore(TrainerConfig(model=str(model_dir), store=store, **kw)))


def params(c: Coordinator) -> dict[str, torch.Tensor]:
    with c.core.engine.full_parameters() as module:
        return {k: v.detach().clone().float() for k, v in module.named_parameters()}


def step(c: Coordinator, i: int, loss: str = "grpo"):
    return c.train_step(f"run/step-{i}", loss, request_batch(loss, seed=i), NO_PARAMS, f"cursor-{i}")


def assert_same(a: dict, b: dict, atol: float = 1e-6):
    assert a.keys() == b.keys()
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert worst <= atol, worst


@pytest.mark.parametrize("stage", [0, 3])
def test_resume_from_checkpoint_is_exact(tiny_model_dir, tmp_path, stage):
    a = make(tiny_model_dir, tmp_path / "a", zero_stage=stage)
    for i in (1, 2):
        step(a, i)
    a.save_checkpoint("ck")
    later = [step(a, i) for i in (3, 4)]
    expected, lr = params(a), a.state().learning_rate

    b = make(tiny_model_dir, tmp_path / "a", zero_stage=stage)  # a restarted trainer on the same store
    state = b.load_checkpoint("latest")
    assert (state.global_step, state.data_cursor, state.applied_step_ids) == (2, "cursor-2", ["run/step-1", "run/step-2"])
    again = [step(b, i) for i in (3, 4)]
    assert [r.replayed for r in again] == [False, False]
    assert [r.metrics["lr"] for r in again] == pytest.approx([r.metrics["lr"] for r in later])
    assert [r.metrics["loss"] for r in again] == pytest.approx([r.metrics["loss"] for r in later], abs=1e-6)
    assert b.state().learning_rate == lr and b.state().global_step == 4
    assert_same(params(b), expected)


def test_exactly_once_across_restarts_and_rollback(tiny_model_dir, tmp_path):
    a = make(tiny_model_dir, tmp_path)
    first = step(a, 1)
    a.save_checkpoint("one")
    step(a, 2)
    before = params(a)
    replay = step(a, 1)
    assert replay.replayed and replay.metrics == first.metrics and replay.global_step == 1
    assert a.state().global_step == 2
    assert_same(params(a), before, atol=0.0)

    b = make(tiny_model_dir, tmp_path)  # restart without loading a checkpoint: the journal refuses
    assert step(b, 2).replayed and b.state().global_step == 0
    b.load_checkpoint("one")  # rollback: step 2's effect is gone, so it may be applied again
    redo = step(b, 2)
    assert not redo.replayed and redo.global_step == 2
    assert step(b, 1).replayed


def test_a_checkpoint_points_into_the_journal_so_its_size_does_not_grow_with_the_steps(tiny_model_dir, tmp_path):
    a = make(tiny_model_dir, tmp_path)
    step(a, 1)
    a.save_checkpoint("early")
    early = sum(f.stat().st_size for f in a.core.store.checkpoint_dir("early").iterdir())
    for i in range(2, 3002):  # a long run's journal, as if 3,000 steps had been applied
        record = {"global_step": i, "metrics": {"loss": 1.0, "lr": 1e-3, "tokens": 16.0, "grad_norm": 0.5}}
        a.core.applied[f"run/step-{i}"] = record
        a.core.store.append_journal(f"run/step-{i}", record)
    a.save_checkpoint("late")
    late = sum(f.stat().st_size for f in a.core.store.checkpoint_dir("late").iterdir())
    assert abs(late - early) < 1024, (early, late)  # a copy of 3,000 records would add ~300 kB

    b = make(tiny_model_dir, tmp_path)
    assert b.load_checkpoint("early").applied_step_ids == ["run/step-1"]
    assert step(b, 2).global_step == 2 and not step(b, 2000).replayed  # rolled back: applied again
    assert len(b.load_checkpoint("late").applied_step_ids) == 1000  # GetState lists the newest 1,000
    assert step(b, 2000).replayed and len(b.core.applied) == 3001


def test_a_checkpoint_from_before_a_rollback_finds_its_journal(tiny_model_dir, tmp_path):
    a = make(tiny_model_dir, tmp_path)
    for i in (1, 2):
        step(a, i)
    a.save_checkpoint("two")
    step(a, 3)
    a.save_checkpoint("three")
    a.load_checkpoint("two")  # the journal is rewritten: the one "three" points into is kept
    step(a, 4)
    state = a.load_checkpoint("three")
    assert state.applied_step_ids == ["run/step-1", "run/step-2", "run/step-3"] and state.global_step == 3
    assert not step(a, 4).replayed and step(a, 3).replayed


def test_a_checkpoint_holding_its_applied_steps_still_loads(tiny_model_dir, tmp_path):
    a = make(tiny_model_dir, tmp_path)
    step(a, 1)
    core = a.core  # a checkpoint as trainers wrote them before journal marks: the applied set inside
    client = {"data_cursor": "cursor-1", "applied": list(core.applied.items()), "rng": torch.get_rng_state()}
    core.engine.save(core.store.checkpoints, core.store.temp_tag("old"), client)
    core.store.commit_checkpoint("old")
    step(a, 2)
    state = a.load_checkpoint("old")
    assert (state.global_step, state.applied_step_ids) == (1, ["run/step-1"])
    assert not step(a, 2).replayed and step(a, 1).replayed


def test_micro_batches_accumulate_to_the_same_step(tiny_model_dir, tmp_path):
    # adam_eps = 1 makes the update ~ linear in the gradient (Adam's first step is ~sign(g) otherwise,
    # which turns float round-off on near-zero gradients into full-size differences).
    linear = {"zero_stage": 2, "adam_eps": 1.0, "schedule": ScheduleConfig(lr=1.0)}
    whole = make(tiny_model_dir, tmp_path / "w", **linear)
    split = make(tiny_model_dir, tmp_path / "s", micro_batch_tokens=16, **linear)
    mopd = trainer_pb2.LossParams(eps_low=0.1, eps_high=10.0)
    r1 = whole.train_step("x", "mopd", request_batch("mopd", lengths=(8, 12, 5, 7)), mopd, "")
    r2 = split.train_step("x", "mopd", request_batch("mopd", lengths=(8, 12, 5, 7)), mopd, "")
    for k in ("loss", "grad_norm", "tokens", "entropy", "advantage_mean", "truncated_fraction", "mismatch_mean",
              "mismatch_p99", "mismatch_max", "window_dropped_fraction", "kl_inf_train"):
        assert r2.metrics[k] == pytest.approx(r1.metrics[k], rel=1e-5, abs=1e-6), k
    assert_same(params(split), params(whole), atol=1e-6)


def test_sft_learns_and_publishes_loadable_weights(tiny_model_dir, tmp_path):
    c = make(tiny_model_dir, tmp_path, schedule=ScheduleConfig(lr=3e-3))
    losses = [c.train_step(f"s{i}", "sft", request_batch("sft"), NO_PARAMS, "").metrics["loss"] for i in range(4)]
    assert losses[-1] < losses[0] - 0.5, losses
    ref = c.publish_weights()
    assert ref.version == 1 and c.state().weight_version == 1
    verify_dir(ref.uri, ref.sha256)
    model = load_causal_lm(ref.uri)
    assert_same({k: v.float() for k, v in model.named_parameters()}, params(c), atol=0.0)
    assert load_tokenizer(ref.uri).pad_token_id == load_tokenizer(tiny_model_dir).pad_token_id
    assert c.publish_weights() == ref, "unchanged weights (a retried publish) are the same version, not a new one"
    c.train_step("s4", "sft", request_batch("sft"), NO_PARAMS, "")
    again = c.publish_weights()  # side files rendered once and reused; the digest still matches the directory
    assert again.version == 2 and again.sha256 != ref.sha256 and again.sha256 == sha256_dir(again.uri)


def test_zero3_publishes_the_gathered_weights_hashed_while_written(tiny_model_dir, tmp_path):
    c = make(tiny_model_dir, tmp_path, zero_stage=3, schedule=ScheduleConfig(lr=1e-2))
    step(c, 1, "sft")
    ref = c.publish_weights()
    assert ref.sha256 == sha256_dir(ref.uri)
    assert_same({k: v.float() for k, v in load_causal_lm(ref.uri).named_parameters()}, params(c), atol=0.0)


def test_loss_of_the_wrong_model_kind_is_refused(tiny_model_dir, tmp_path):
    c = make(tiny_model_dir, tmp_path)
    with pytest.raises(InvalidArgument) as err:
        c.train_step("x", "bt", request_batch("bt", lengths=(4, 6)), NO_PARAMS, "")
    assert err.value.field == "loss" and c.state().global_step == 0 and c.state().applied_step_ids == []


def test_reward_model_trains_with_bt_and_publishes_a_sequence_classifier(tiny_model_dir, tmp_path):
    from transformers import AutoModelForSequenceClassification

    c = make(tiny_model_dir, tmp_path, model_kind="sequence_classifier", schedule=ScheduleConfig(lr=3e-3))
    batch = request_batch("bt", lengths=(6, 9, 5, 7))
    runs = [c.train_step(f"rm{i}", "bt", batch, NO_PARAMS, "").metrics for i in range(4)]
    assert runs[-1]["loss"] < runs[0]["loss"] and runs[-1]["accuracy"] == 1.0
    assert runs[0]["tokens"] == 27 and "entropy" not in runs[0]
    ref = c.publish_weights()
    rm = AutoModelForSequenceClassification.from_pretrained(ref.uri, local_files_only=True).eval()
    assert rm.config.num_labels == 1
    tensors = load_file(f"{ref.uri}/model.safetensors")
    assert any(k.startswith("score.") for k in tensors)
    mine = c.core.engine.module.eval()
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        assert rm(input_ids=ids).logits.item() == pytest.approx(mine(input_ids=ids).logits.item(), abs=1e-6)


def test_learning_rate_from_the_request_overrides_the_schedule_for_one_step(tiny_model_dir, tmp_path):
    c = make(tiny_model_dir, tmp_path, zero_stage=1, schedule=ScheduleConfig(lr=1e-3))
    before = params(c)
    sent = c.train_step("a", "sft", request_batch("sft"), NO_PARAMS, "", 2.5e-4)
    moved = max((params(c)[k] - before[k]).abs().max().item() for k in before)
    assert sent.metrics["lr"] == 2.5e-4 and moved == pytest.approx(2.5e-4, rel=0.05)  # Adam's first step ~ lr
    assert c.train_step("b", "sft", request_batch("sft"), NO_PARAMS, "").metrics["lr"] == pytest.approx(1e-3)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(InvalidArgument) as err:
            c.train_step("c", "sft", request_batch("sft"), NO_PARAMS, "", bad)
        assert err.value.field == "learning_rate"
    assert c.state().global_step == 2


@pytest.mark.parametrize("stage", [0, 1])
def test_reset_optimizer_starts_adam_afresh_once(tiny_model_dir, tmp_path, stage):
    c = make(tiny_model_dir, tmp_path, zero_stage=stage, schedule=ScheduleConfig(lr=1e-3))
    for i in (1, 2, 3):
        step(c, i, "sft")
    assert adam_steps(c) == {3}

    def moves(step_id: str, reset: bool) -> torch.Tensor:
        before = params(c)
        c.train_step(step_id, "sft", request_batch("sft", seed=9), NO_PARAMS, "", None, reset)
        after = params(c)
        d = torch.cat([(after[k] - before[k]).abs().flatten() for k in before])
        return d[d > 0]

    carried = moves("carried", False)
    fresh = moves("fresh", True)
    assert adam_steps(c) == {1}
    # Adam's first step moves every parameter with a gradient by lr; carried moments move them unevenly.
    assert (fresh - 1e-3).abs().le(1e-5).float().mean() > 0.99
    assert (carried - 1e-3).abs().le(1e-5).float().mean() < 0.5
    assert c.train_step("fresh", "sft", request_batch("sft"), NO_PARAMS, "", None, True).replayed
    assert adam_steps(c) == {1}  # a replayed step id clears nothing
    step(c, 5, "sft")
    assert adam_steps(c) == {2} and c.state().global_step == 6


@pytest.mark.parametrize("stage", [0, 2, 3])
def test_a_reward_model_starts_from_the_policy_weights_once(tiny_model_dir, tmp_path, stage):
    policy = make(tiny_model_dir, tmp_path / "policy", schedule=ScheduleConfig(lr=1e-2))
    step(policy, 1, "sft")
    ref = policy.publish_weights()
    published = {k: v.float() for k, v in load_causal_lm(ref.uri).named_parameters()}
    rm = make(tiny_model_dir, tmp_path / "rm", zero_stage=stage, model_kind="sequence_classifier",
              schedule=ScheduleConfig(lr=1e-3))
    batch = request_batch("bt", lengths=(6, 9, 5, 7))
    rm.train_step("rm-0", "bt", batch, NO_PARAMS, "", 1e-3)  # an earlier reward model's training

    first = rm.train_step("rm-1", "bt", batch, NO_PARAMS, "", 0.0, False, (ref.uri, ref.sha256))
    mine = params(rm)
    backbone = {k: mine[k] for k in mine if not k.startswith("score.")}
    assert backbone.keys() == {k for k in published if k != "lm_head.weight"}
    assert_same(backbone, {k: published[k] for k in backbone}, atol=0.0)
    assert (first.metrics["init_copied"], first.metrics["init_fresh"], first.metrics["optimizer_reset"]) == (len(backbone), 1, 1)
    assert mine["score.weight"].std().item() == pytest.approx(0.02, rel=0.3)
    assert adam_steps(rm) == {1}

    rm.train_step("rm-2", "bt", batch, NO_PARAMS, "", 1e-3)
    moved = params(rm)
    assert rm.train_step("rm-1", "bt", batch, NO_PARAMS, "", 0.0, False, (ref.uri, ref.sha256)).replayed
    assert_same(params(rm), moved, atol=0.0)  # a replayed step loads nothing
    rm.train_step("rm-3", "bt", batch, NO_PARAMS, "", 0.0, False, (f"file://{ref.uri}", ""))  # a later stage: again
    assert_same(params(rm), mine, atol=0.0)

    from safetensors.torch import save_file

    partial = tmp_path / "partial"  # a folder without the final norm: that scale starts at 1
    partial.mkdir()
    save_file({k: v for k, v in published.items() if k != "model.norm.weight"}, str(partial / "model.safetensors"))
    third = rm.train_step("rm-4", "bt", batch, NO_PARAMS, "", 0.0, False, (str(partial), ""))
    assert third.metrics["init_fresh"] == 2 and bool((params(rm)["model.norm.weight"] == 1.0).all())


def test_init_weights_that_do_not_fit_are_refused_before_anything_moves(tiny_model_dir, tmp_path):
    from safetensors.torch import save_file

    from services.common.errors import ChecksumMismatch

    rm = make(tiny_model_dir, tmp_path / "rm", model_kind="sequence_classifier")
    other, alien, empty = tmp_path / "other", tmp_path / "alien", tmp_path / "empty"
    empty.mkdir()
    for folder, tensors in ((other, {"model.embed_tokens.weight": torch.zeros(3, 3)}), (alien, {"encoder.w": torch.zeros(2)})):
        folder.mkdir()
        save_file(tensors, str(folder / "model.safetensors"))
    before = params(rm)
    cases = [((str(tmp_path / "missing"), ""), "does not exist"), ((str(other), ""), "another size"),
             ((str(alien), ""), "shares no parameter"), ((str(empty), ""), "no .safetensors")]
    for init, why in cases:
        with pytest.raises(InvalidArgument, match=why) as err:
            rm.train_step("x", "bt", request_batch("bt"), NO_PARAMS, "", None, False, init)
        assert err.value.field == "init.uri"
    with pytest.raises(ChecksumMismatch):
        rm.train_step("x", "bt", request_batch("bt"), NO_PARAMS, "", None, False, (str(tiny_model_dir), "0" * 64))
    assert rm.state().global_step == 0 and rm.state().applied_step_ids == []
    assert_same(params(rm), before, atol=0.0)


def test_per_step_weight_decay_and_grad_clip_take_effect(tiny_model_dir, tmp_path):
    """AdamW's decoupled decay moves every weight by -lr * wd * w on top of the Adam step; a clip far
    below the gradient norm shrinks Adam's first step (the clipped gradient falls under adam_eps);
    unset, the configured values apply (weight_decay 0, grad_clip 1)."""
    from services.trainer.core import StepOptions

    lr, batch = 1e-3, request_batch("sft", seed=3)

    c = make(tiny_model_dir, tmp_path)
    c.save_checkpoint("start")

    def moved(options, name):
        c.load_checkpoint("start")  # the same weights and a fresh optimizer for each variant
        before = params(c)
        c.train_step(name, "sft", batch, NO_PARAMS, "", lr, options=options)
        after = params(c)
        return before, {k: after[k] - before[k] for k in before}

    w0, plain = moved(None, "plain")
    _, decayed = moved(StepOptions(weight_decay=10.0), "decay")
    for k in plain:
        torch.testing.assert_close(decayed[k] - plain[k], -lr * 10.0 * w0[k], rtol=1e-3, atol=1e-7)
    _, clipped = moved(StepOptions(grad_clip=1e-12), "clip")
    size = lambda d: sum(float(v.abs().sum()) for v in d.values())  # noqa: E731
    assert size(clipped) < 0.5 * size(plain)
    _, unclipped = moved(StepOptions(grad_clip=0.0), "noclip")
    assert size(unclipped) == pytest.approx(size(plain), rel=0.05)  # Adam's first step barely sees a clip to 1
    with pytest.raises(InvalidArgument) as err:
        c.train_step("x", "sft", batch, NO_PARAMS, "", options=StepOptions(grad_clip=-1.0))
    assert err.value.field == "grad_clip"


def test_a_step_runs_on_the_cores_of_the_pool(tiny_model_dir, tmp_path):
    from services.common.cores import host_cores
    from tests.common.test_cores import watch

    c = make(tiny_model_dir, tmp_path / "store", cores_dir=tmp_path / "cores")
    seen = watch(c.core.engine, "train_step", tmp_path / "cores", host_cores())
    before = torch.get_num_threads()
    step(c, 0)
    step(c, 1, "sft")
    assert seen == [(host_cores(), 0)] * 2 and torch.get_num_threads() == before
