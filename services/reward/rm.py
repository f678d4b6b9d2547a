"""Reward-model scoring: a Bradley–Terry sequence classifier scores (prompt, response) pairs.

The model is any HF `AutoModelForSequenceClassification` directory with one output (the trainer's
`bt` loss, −log σ(r_chosen − r_rejected), trains exactly that); a causal-LM directory also loads,
with a score head initialised from a fixed seed, so results are reproducible. The conversation is
rendered with the tokenizer's chat template, cut from the left to `max_length` tokens (the end of
the response matters most), and the scalar at the last real token is the reward. The token ids and
the pad id are services/common/rm_inputs.py's, the ones the trainer's `bt` rows are built and
padded with, so the score served is the score trained. Calls are serialised by a lock; batches go
through in one forward pass. This module knows nothing of tasks or gRPC.
"""

from __future__ import annotations

import threading
from pathlib import Path

from services.common.modelio import load_tokenizer, resolve_uri, torch_dtype
from services.common.rm_inputs import resolve_pad_id, reward_input_ids, reward_text


class RewardModel:
    """A loaded reward model: `score([(messages, response), ...]) -> [float, ...]`."""

    def __init__(self, path: str | Path, device: str = "cpu", dtype: str = "float32", max_length: int = 2048):
        import torch
        from transformers import AutoModelForSequenceClassification

        directory = resolve_uri(path, "reward_model")
        self.tokenizer = load_tokenizer(directory)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = AutoModelForSequenceClassification.from_pretrained(
                str(directory), num_labels=1, dtype=torch_dtype(dtype), local_files_only=True
            )
        self.pad_id = resolve_pad_id(model.config.pad_token_id, self.tokenizer, str(directory))
        model.config.pad_token_id = self.pad_id
        self.model = model.to(device).eval()
        self.device, self.max_length = device, max_length
        self.path = str(directory)
        self._lock = threading.Lock()

    def render(self, messages: list[dict], response: str) -> str:
        """The conversation with the response as the final assistant turn, as the model reads it."""
        return reward_text(self.tokenizer, messages, response)

    def input_ids(self, messages: list[dict], response: str) -> list[int]:
        """The token ids scored: exactly those the trainer's `bt` rows hold (services/common/rm_inputs.py)."""
        return reward_input_ids(self.tokenizer, messages, response, self.max_length)

    def score(self, pairs: list[tuple[list[dict], str]]) -> list[float]:
        """One scalar reward per (messages, response)."""
        import torch

        if not pairs:
            return []
        rows = [self.input_ids(m, r) for m, r in pairs]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        att = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):  # right-padded, as the trainer pads
            ids[i, :len(r)] = torch.tensor(r, dtype=torch.long)
            att[i, :len(r)] = 1
        with self._lock, torch.inference_mode():
            logits = self.model(input_ids=ids.to(self.device), attention_mask=att.to(self.device)).logits
        return [float(x) for x in logits[:, 0].float().cpu()]
