"""The models and data the TRL comparison starts from, and the one evaluator both sides are scored by.

`build_models(root, ...)` writes, under `root`: the tiny model (`init_model(preset="tiny", seed)`),
the synthetic tasks (`write_dataset(seed)`), a *student* (`base`: the tiny model after a few SFT
steps on one domain, so rollouts are well-formed and rewards vary) and a *teacher* (the same run
continued for more SFT steps). The SFT loop is plain PyTorch (AdamW, token cross-entropy on the
assistant tokens of `services.common.chat_template.assistant_mask`), deterministic by seed.

`validation_reward(model_dir, records, max_tokens)` is greedy decoding in-process plus the domain's
verifier (`services.reward.verifiers`), applied identically to Cascade's and TRL's final weights.
This module knows nothing about Cascade's services or TRL's trainers.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from services.common.chat_template import assistant_mask, render
from services.common.tasks import TaskRecord
from services.orchestrator import datasets
from services.orchestrator.batches import draw_batch
from services.reward.core import strip_thinking
from services.reward.verifiers import VERIFIERS, Context


@dataclass(frozen=True)
class BenchModels:
    data: Path
    """`<domain>/{train,validation,sft}.jsonl` written by `write_dataset(seed)`."""
    base: Path
    """The student / GRPO start model: `base_steps` SFT steps from the tiny init."""
    teacher: Path
    """The MOPD / GKD teacher: the same SFT run continued to `teacher_steps`."""
    info: dict


def build_models(root: Path, domain: str, seed: int = 0, base_steps: int = 60, teacher_steps: int = 120,
                 batch: int = 16, lr: float = 3e-3) -> BenchModels:
    """Build (or reuse, when `root/models.json` matches) the bench's data and models."""
    from services.common.modelio import load_causal_lm, load_tokenizer
    from services.common.synth import write_dataset
    from services.common.tinymodel import init_model

    root = Path(root)
    key = {"domain": domain, "seed": seed, "base_steps": base_steps, "teacher_steps": teacher_steps,
           "batch": batch, "lr": lr}
    stamp = root / "models.json"
    out = BenchModels(root / "data", root / "base", root / "teacher", key)
    if stamp.exists() and json.loads(stamp.read_text()).get("key") == key:
        return BenchModels(out.data, out.base, out.teacher, {**json.loads(stamp.read_text()), "cached": True})
    started = time.perf_counter()
    write_dataset(out.data, seed=seed)
    init = init_model(root / "init", preset="tiny", seed=seed)
    torch.manual_seed(seed)
    tok, model = load_tokenizer(init), load_causal_lm(init)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    pool = datasets.sft_examples(out.data, [domain])
    losses = []
    for step in range(teacher_steps):
        examples = draw_batch(pool, seed, "bench-sft", step, batch)
        losses.append(sft_step(model, opt, tok, examples))
        if step + 1 == base_steps:
            model.save_pretrained(out.base)
            tok.save_pretrained(out.base)
    model.save_pretrained(out.teacher)
    tok.save_pretrained(out.teacher)
    info = {"key": key, "loss_at_base": losses[base_steps - 1], "loss_at_teacher": losses[-1],
            "seconds": time.perf_counter() - started}
    stamp.write_text(json.dumps(info))
    return BenchModels(out.data, out.base, out.teacher, {**info, "cached": False})


def sft_step(model, opt, tok, examples: list[dict]) -> float:
    """One AdamW step of L = −(1/Σ m_t) Σ_t m_t · log p(x_t | x_<t), m = the assistant-token mask."""
    rows = [assistant_mask(tok, ex["messages"], thinking="</think>" in ex["messages"][-1]["content"]) for ex in examples]
    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (row, m) in enumerate(rows):
        ids[i, : len(row)], mask[i, : len(m)], attn[i, : len(row)] = torch.tensor(row), torch.tensor(m), 1
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
    logp = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    m = mask[:, 1:].float()
    loss = -(logp * m).sum() / m.sum()
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.item()


def score_responses(records: list[TaskRecord], texts: list[str]) -> list[float]:
    """The verifier's reward of each response (the reward service's path, in-process): 0 where the
    answer never leaves <think>."""
    out = []
    for record, text in zip(records, texts):
        answer = strip_thinking(text)
        out.append(0.0 if answer is None else float(VERIFIERS[record.domain].fn(record, answer, Context()).reward))
    return out


@torch.no_grad()
def validation_reward(model_dir: Path, records: list[TaskRecord], max_tokens: int) -> float:
    """Mean verifier reward of greedy, non-thinking responses of `model_dir` to `records`."""
    from services.common.modelio import load_causal_lm, load_tokenizer

    tok, model = load_tokenizer(model_dir), load_causal_lm(model_dir)
    model.eval()
    prompts = [render(tok, [m.model_dump() for m in r.messages], thinking=False) for r in records]
    tok.padding_side = "left"
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    seqs = model.generate(**enc, max_new_tokens=max_tokens, do_sample=False, pad_token_id=tok.pad_token_id)
    eos = model.generation_config.eos_token_id
    texts = []
    for row in seqs[:, enc["input_ids"].shape[1]:].tolist():
        cut = next((i for i, t in enumerate(row) if t == eos or (isinstance(eos, list) and t in eos)), len(row))
        texts.append(tok.decode(row[:cut], skip_special_tokens=False, clean_up_tokenization_spaces=False))
    rewards = score_responses(records, texts)
    return sum(rewards) / len(rewards)
