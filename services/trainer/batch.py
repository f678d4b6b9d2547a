"""Decode and validate a `TrainBatch` (and its `LossParams`) into padded tensors.

Every check raises `InvalidArgument` naming the request field (`batch.teacher_logprobs`,
`params.eps_low`...), so a bad request is refused before anything is applied. A decoded `Batch`
is right-padded to its longest row; `loss_mask` column 0 is always 0 (the first token of a row
has no prediction) and padding is never trained. `Batch` also knows how to cut itself into
data-parallel shards and micro-batches. This module knows nothing of models, engines or ranks'
communication; it only turns the wire format into checked tensors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from services.common import codec
from services.common.errors import InvalidArgument
from services.common.pb import trainer_pb2
from services.trainer.losses import KL_ESTIMATORS, LOSSES, LossParams, LossSpec

TOKEN_FIELDS = ("inference_logprobs", "teacher_logprobs", "reference_logprobs")


@dataclass(frozen=True)
class Batch:
    """A validated batch as tensors (B rows, T = longest row)."""

    input_ids: Tensor  # (B, T) long, padding = pad_id
    attention_mask: Tensor  # (B, T) long
    loss_mask: Tensor  # (B, T) float32
    advantages: Tensor | None = None  # (B,)
    inference_logprobs: Tensor | None = None  # (B, T)
    teacher_logprobs: Tensor | None = None
    reference_logprobs: Tensor | None = None
    pairs: Tensor | None = None  # (P, 2) long
    position_ids: Tensor | None = None  # (B, T) long: packed rows only (positions restart per conversation)

    @property
    def rows(self) -> int:
        return int(self.input_ids.shape[0])

    def subset(self, rows: list[int], pairs: list[tuple[int, int]] | None = None, weight: float = 1.0) -> Batch:
        """Rows `rows` (trimmed to their longest), `pairs` re-indexed into them; weight 0 zeroes the mask."""
        idx = torch.tensor(rows, dtype=torch.long)
        width = max(int(self.attention_mask[idx].sum(dim=1).max()), 1)
        cut = {}
        for name in ("input_ids", "attention_mask", "loss_mask", "position_ids", *TOKEN_FIELDS):
            value = getattr(self, name)
            cut[name] = None if value is None else value[idx, :width]
        cut["loss_mask"] = cut["loss_mask"] * weight
        cut["advantages"] = None if self.advantages is None else self.advantages[idx]
        if self.pairs is not None:
            where = {r: i for i, r in enumerate(rows)}
            cut["pairs"] = torch.tensor([[where[c], where[r]] for c, r in pairs or []], dtype=torch.long).reshape(-1, 2)
        return Batch(**cut)

    def _groups(self, by_pairs: bool) -> list[tuple[list[int], list[tuple[int, int]]]]:
        if by_pairs:
            return [([int(c), int(r)], [(int(c), int(r))]) for c, r in self.pairs.tolist()]
        return [([i], []) for i in range(self.rows)]

    @staticmethod
    def _merge(groups) -> tuple[list[int], list[tuple[int, int]]]:
        rows = list(dict.fromkeys(r for g in groups for r in g[0]))
        return rows, [p for g in groups for p in g[1]]

    def shard(self, rank: int, world: int, by_pairs: bool) -> Batch:
        """Rank `rank`'s share: every world-th row (or pair). An empty share is row 0 with weight 0,
        so every rank still runs forward and backward (the collectives need it)."""
        mine = self._groups(by_pairs)[rank::world]
        if not mine:
            return self.subset([0], [], weight=0.0)
        return self.subset(*self._merge(mine))

    def micro_batches(self, max_tokens: int, by_pairs: bool) -> list[Batch]:
        """Consecutive rows (or pairs) packed so rows x longest row <= max_tokens (>= 1 group each)."""
        groups = self._groups(by_pairs)
        if max_tokens <= 0 or len(groups) <= 1:
            return [self]
        lengths = self.attention_mask.sum(dim=1).tolist()
        out, current = [], []
        for g in groups:
            trial = self._merge([*current, g])[0]
            if current and len(trial) * max(lengths[r] for r in trial) > max_tokens:
                out.append(self.subset(*self._merge(current)))
                current = []
            current.append(g)
        out.append(self.subset(*self._merge(current)))
        return out


SAMPLING_FIELDS = ("temperature", "top_p", "top_k")


def decode_params(msg: trainer_pb2.LossParams, spec: LossSpec | None = None) -> LossParams:
    """LossParams from the request, defaults for unset fields, each value checked (against the loss
    `spec` when given: sampling settings only for the rollout losses, which have log pi_inf)."""
    d = LossParams()
    names = ("kl_coef", "eps_low", "eps_high", "grpo_alpha", "temperature", "top_p", "top_k", "kl_clamp", "tis_cap")
    values = {f: (getattr(msg, f) if msg.HasField(f) else getattr(d, f)) for f in names}
    for name, v in values.items():
        if v is not None and not math.isfinite(v):
            raise InvalidArgument(f"params.{name}", f"is {v} (must be finite)")
    if values["kl_coef"] < 0:
        raise InvalidArgument("params.kl_coef", f"is {values['kl_coef']} (must be >= 0)")
    if values["eps_low"] < 0:
        raise InvalidArgument("params.eps_low", f"is {values['eps_low']} (must be >= 0)")
    if values["eps_high"] <= values["eps_low"]:
        raise InvalidArgument("params.eps_high", f"is {values['eps_high']} (must exceed eps_low = {values['eps_low']})")
    if values["temperature"] < 0:
        raise InvalidArgument("params.temperature", f"is {values['temperature']} (must be >= 0; 0 = greedy)")
    if not 0 < values["top_p"] <= 1:
        raise InvalidArgument("params.top_p", f"is {values['top_p']} (must be in (0, 1]; 1 = no nucleus filter)")
    if values["top_k"] < 0:
        raise InvalidArgument("params.top_k", f"is {values['top_k']} (must be >= 0; 0 = no top-k filter)")
    for name in ("kl_clamp", "tis_cap"):
        if values[name] is not None and values[name] <= 0:
            raise InvalidArgument(f"params.{name}", f"is {values[name]} (must be > 0, or unset for none)")
    values["kl_estimator"] = msg.kl_estimator or d.kl_estimator
    if values["kl_estimator"] not in KL_ESTIMATORS:
        raise InvalidArgument("params.kl_estimator", f"is {msg.kl_estimator!r}; expected one of {', '.join(KL_ESTIMATORS)} (empty = {d.kl_estimator})")
    if spec is not None and "inference_logprobs" not in spec.requires and "inference_logprobs" not in spec.requires_when.values():
        for name in SAMPLING_FIELDS:
            if values[name] != getattr(d, name):
                raise InvalidArgument(f"params.{name}", f"is {values[name]}, but loss {spec.name!r} trains on no sampled "
                                      "tokens; only grpo and mopd take the sampling settings")
    return LossParams(**values)


def lookup_loss(name: str) -> LossSpec:
    if name not in LOSSES:
        raise InvalidArgument("loss", f"unknown loss {name!r}; expected one of {', '.join(LOSSES)}")
    return LOSSES[name]


def _present(msg: trainer_pb2.TrainBatch, name: str) -> bool:
    return msg.HasField(name) and len(getattr(msg, name).lengths) > 0


def _pad(rows: list[np.ndarray], width: int, fill, dtype) -> Tensor:
    out = torch.full((len(rows), width), fill, dtype=dtype)
    for i, r in enumerate(rows):
        out[i, : r.size] = torch.from_numpy(r.copy())
    return out


def decode_batch(
    msg: trainer_pb2.TrainBatch, spec: LossSpec, params: LossParams, vocab_size: int, max_length: int, pad_id: int
) -> Batch:
    """Check every array of `msg` against the loss `spec` and the model; return padded tensors."""
    for name in spec.requires:
        if not _present(msg, name):
            raise InvalidArgument(f"batch.{name}", f"is required by loss {spec.name!r}")
    for param, name in spec.requires_when.items():
        if getattr(params, param) and not _present(msg, name):
            raise InvalidArgument(f"batch.{name}", f"is required by loss {spec.name!r} when params.{param} != 0")
    if not _present(msg, "input_ids"):
        raise InvalidArgument("batch.input_ids", "is empty; a batch needs at least one sequence")
    ids, lengths = codec.decode_flat(msg.input_ids, "batch.input_ids", "int32")
    if min(lengths) == 0:
        raise InvalidArgument("batch.input_ids", f"row {lengths.index(0)} is empty")
    if max(lengths) > max_length:
        i = int(np.argmax(lengths))
        raise InvalidArgument("batch.input_ids", f"row {i} has {lengths[i]} tokens; the model takes at most {max_length}")
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        bad = int(np.flatnonzero((ids < 0) | (ids >= vocab_size))[0])
        raise InvalidArgument("batch.input_ids", f"token id {ids[bad]} at flat index {bad} is outside the vocabulary [0, {vocab_size})")
    width, rows = max(lengths), codec.split(ids, lengths)
    out: dict[str, Tensor | None] = {
        "input_ids": _pad(rows, width, pad_id, torch.long),
        "attention_mask": _pad([np.ones(n, np.int64) for n in lengths], width, 0, torch.long),
    }
    if _present(msg, "loss_mask"):
        mask, mlen = codec.decode_flat(msg.loss_mask, "batch.loss_mask", "int32")
        codec.require_lengths(mlen, lengths, "batch.loss_mask", "batch.input_ids")
        if mask.size and not np.isin(mask, (0, 1)).all():
            raise InvalidArgument("batch.loss_mask", "values must be 0 or 1")
        loss_mask = _pad(codec.split(mask.astype(np.float32), lengths), width, 0.0, torch.float32)
    else:  # bt scores whole sequences; the mask only counts tokens
        loss_mask = out["attention_mask"].float()
    loss_mask[:, 0] = 0.0
    out["loss_mask"] = loss_mask
    for name in TOKEN_FIELDS:
        out[name] = None
        if _present(msg, name):
            flat, flen = codec.decode_flat(getattr(msg, name), f"batch.{name}", "float32")
            codec.require_lengths(flen, lengths, f"batch.{name}", "batch.input_ids")
            codec.require_finite(flat, f"batch.{name}")
            values = _pad(codec.split(flat, lengths), width, 0.0, torch.float32)
            positive = (values > 1e-4) & (loss_mask > 0)
            if positive.any():
                r, t = (int(x) for x in positive.nonzero()[0])
                raise InvalidArgument(f"batch.{name}", f"row {r} token {t} is {float(values[r, t])}; log-probabilities are <= 0")
            out[name] = values
    out["advantages"] = _decode_advantages(msg, len(lengths)) if _present(msg, "advantages") else None
    out["pairs"] = _decode_pairs(msg, len(lengths)) if _present(msg, "preference_pairs") else None
    if spec.unit != "pairs" and float(loss_mask.sum()) == 0:
        raise InvalidArgument("batch.loss_mask", "selects no trainable token (position 0 of a row is never trained)")
    return Batch(**out)


def _decode_advantages(msg: trainer_pb2.TrainBatch, rows: int) -> Tensor:
    flat, lengths = codec.decode_flat(msg.advantages, "batch.advantages", "float32")
    if len(lengths) != 1 or lengths[0] != rows:
        raise InvalidArgument("batch.advantages", f"must be one row of {rows} values (one per sequence), got row lengths {lengths}")
    codec.require_finite(flat, "batch.advantages")
    return torch.from_numpy(flat.copy())


def _decode_pairs(msg: trainer_pb2.TrainBatch, rows: int) -> Tensor:
    flat, lengths = codec.decode_flat(msg.preference_pairs, "batch.preference_pairs", "int32")
    if len(lengths) != 1 or lengths[0] % 2:
        raise InvalidArgument("batch.preference_pairs", f"must be one row of an even number of row indices, got row lengths {lengths}")
    if flat.min() < 0 or flat.max() >= rows:
        raise InvalidArgument("batch.preference_pairs", f"row indices must lie in [0, {rows}), got {flat.min()}..{flat.max()}")
    pairs = torch.from_numpy(flat.astype(np.int64)).reshape(-1, 2)
    same = (pairs[:, 0] == pairs[:, 1]).nonzero()
    if len(same):
        raise InvalidArgument("batch.preference_pairs", f"pair {int(same[0])} compares row {int(pairs[same[0], 0])} with itself")
    return pairs
