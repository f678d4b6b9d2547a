"""Reward-model scoring: a Bradley–Terry sequence classifier scores (prompt, response) pairs.

The model is any HF `AutoModelForSequenceClassification` directory with one output (the trainer's
`bt` loss, −log σ(r_chosen − r_rejected), trains exactly that); a causal-LM directory also loads,
with a score head initialised from a fixed seed, so results are reproducible. The conversation is
rendered with the tokenizer's chat template, cut from the left to `max_length` tokens (the end of
the response matters most), and the scalar at the last real token is the reward. Calls are
serialised by a lock; batches go through in one forward pass. This module knows nothing of tasks
or gRPC.
"""

from __future__ import annotations

import threading
from pathlib import Path

from services.common.modelio import load_tokenizer, resolve_uri, torch_dtype


class RewardModel:
    """A loaded reward model: `score([(messages, response), ...]) -> [float, ...]`."""

    def __init__(self, path: str | Path, device: str = "cpu", dtype: str = "float32", max_length: int = 2048):
        import torch
        from transformers import AutoModelForSequenceClassification

        directory = resolve_uri(path, "reward_model")
        self.tokenizer = load_tokenizer(directory)
        self.tokenizer.truncation_side = "left"
        self.tokenizer.padding_side = "right"
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = AutoModelForSequenceClassification.from_pretrained(
                str(directory), num_labels=1, dtype=torch_dtype(dtype), local_files_only=True
            )
        model.config.pad_token_id = self.tokenizer.pad_token_id
        self.model = model.to(device).eval()
        self.device, self.max_length = device, max_length
        self.path = str(directory)
        self._lock = threading.Lock()

    def render(self, messages: list[dict], response: str) -> str:
        """The conversation with the response as the final assistant turn, as the model reads it."""
        turns = [*messages, {"role": "assistant", "content": response}]
        if self.tokenizer.chat_template:
            return self.tokenizer.apply_chat_template(turns, tokenize=False)
        return "\n".join(f"{t['role']}: {t['content']}" for t in turns)

    def score(self, pairs: list[tuple[list[dict], str]]) -> list[float]:
        """One scalar reward per (messages, response)."""
        import torch

        if not pairs:
            return []
        texts = [self.render(m, r) for m, r in pairs]
        batch = self.tokenizer(texts, return_tensors="pt", padding=True, truncation=True, max_length=self.max_length)
        with self._lock, torch.inference_mode():
            logits = self.model(**{k: v.to(self.device) for k, v in batch.items()}).logits
        return [float(x) for x in logits[:, 0].float().cpu()]
