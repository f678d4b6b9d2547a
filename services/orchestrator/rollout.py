"""Sampling and scoring through the services: prompts -> samples -> rewards / teacher log-probs.

Shared by the GRPO and MOPD steps and by evaluation. Each function makes one batched call and
returns plain Python data that fits in a step artefact (JSON). This module knows the contracts,
not the stage logic (advantages, losses) or Celery.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from services.common import codec, verdicts
from services.common.chat_template import render
from services.common.pb import common_pb2, policy_pb2, reward_pb2, teacher_pb2
from services.common.tasks import TaskRecord, task_to_json
from services.orchestrator.cascade_config import SamplingConfig


def sampling_params(s: SamplingConfig, seed: int | None) -> policy_pb2.SamplingParams:
    params = policy_pb2.SamplingParams(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                                       max_tokens=s.max_tokens, thinking=s.thinking)
    if seed is not None:
        params.seed = seed
    return params


def render_prompt(tokenizer, record: TaskRecord, thinking: bool) -> list[int]:
    """The token ids the policy renders a record's prompt to: its chat template with the generation
    prompt (thinking mode per `thinking`), encoded without special tokens added."""
    text = render(tokenizer, [{"role": m.role, "content": m.content} for m in record.messages], thinking=thinking)
    return list(tokenizer.encode(text, add_special_tokens=False))


REQUEST_SAMPLES = 4096
"""Samples one Generate request asks for at most (prompts x n): the policy's default
`max_request_samples`; a larger call is sent as several requests of whole prompts."""


def generate(policy, records: Sequence[TaskRecord], n: int, sampling: SamplingConfig, seed: int | None,
             timeout: float | None = None, prompt_ids: Sequence[Sequence[int]] | None = None,
             request_samples: int = REQUEST_SAMPLES) -> dict:
    """Sample `n` responses per record. Samples are prompt-major (sample j of prompt i = i*n + j).
    `prompt_ids` (render_prompt of each record, made ahead) are sent instead of the conversations.
    More than `request_samples` samples go as several requests of whole prompts, joined in order:
    the policy keys a sample's random numbers by seed, prompt and sample index, not by the request,
    so the samples are those of one request.

    Returns {"prompt_ids", "token_ids", "logprobs", "texts", "truncated", "weight_version"}.
    """
    if prompt_ids is not None and len(prompt_ids) != len(records):
        raise ValueError(f"prompt_ids: {len(prompt_ids)} rows for {len(records)} records")
    per = max(1, request_samples // max(n, 1))
    if len(records) <= per:
        return _generate_once(policy, records, n, sampling, seed, timeout, prompt_ids)
    parts = [_generate_once(policy, records[i:i + per], n, sampling, seed, timeout,
                            None if prompt_ids is None else prompt_ids[i:i + per])
             for i in range(0, len(records), per)]
    versions = {p["weight_version"] for p in parts}
    if len(versions) > 1:
        raise RuntimeError(f"the policy changed weights between the parts of one generate call (versions "
                           f"{sorted(versions)}); call again")
    joined = {k: [x for p in parts for x in p[k]] for k in ("prompt_ids", "token_ids", "logprobs", "texts", "truncated")}
    return {**joined, "weight_version": parts[0]["weight_version"]}


def _generate_once(policy, records: Sequence[TaskRecord], n: int, sampling: SamplingConfig, seed: int | None,
                   timeout: float | None, prompt_ids: Sequence[Sequence[int]] | None) -> dict:
    """One Generate request for `records` (see `generate`)."""
    if prompt_ids is not None:
        prompts = [policy_pb2.Prompt(token_ids=np.asarray(ids, dtype="<i4").tobytes()) for ids in prompt_ids]
    else:
        prompts = [
            policy_pb2.Prompt(conversation=common_pb2.Conversation(
                messages=[common_pb2.ChatMessage(role=m.role, content=m.content) for m in r.messages]))
            for r in records
        ]
    request = policy_pb2.GenerateRequest(prompts=prompts, n=n, sampling=sampling_params(sampling, seed))
    reply = policy.call("Generate", request, timeout=timeout)
    return {
        "prompt_ids": [r.tolist() for r in codec.decode(reply.prompt_token_ids, "prompt_token_ids", "int32")],
        "token_ids": [r.tolist() for r in codec.decode(reply.token_ids, "token_ids", "int32")],
        "logprobs": [r.tolist() for r in codec.decode(reply.logprobs, "logprobs", "float32")],
        "texts": list(reply.texts),
        "truncated": [f == policy_pb2.FINISH_REASON_LENGTH for f in reply.finish_reasons],
        "weight_version": int(reply.weight_version),
    }


def score(reward, records: Sequence[TaskRecord], texts: Sequence[str], n: int, timeout: float | None = None) -> dict:
    """Score every sample with its record's verifier: {"rewards", "verdicts", "reasons"} per sample."""
    items = [reward_pb2.ScoreItem(task_json=task_to_json(records[i // n]), response=text)
             for i, text in enumerate(texts)]
    reply = reward.call("Score", reward_pb2.ScoreRequest(items=items), timeout=timeout)
    return {
        "rewards": [float(r.reward) for r in reply.results],
        "verdicts": [verdicts.from_pb(r.verdict) for r in reply.results],
        "reasons": [r.reason for r in reply.results],
    }


def teacher_logprobs(teacher, domain: str, prompt_ids: Sequence[Sequence[int]],
                     completions: Sequence[Sequence[int]], prompt_index: Sequence[int],
                     timeout: float | None = None) -> list[list[float]]:
    """log π_teacher of every completion token; prompts are shared by their completions."""
    request = teacher_pb2.ScoreTokensRequest(
        domain=domain,
        prompt_ids=codec.encode(prompt_ids, "int32"),
        completion_ids=codec.encode(completions, "int32"),
        prompt_index=list(prompt_index),
    )
    reply = teacher.call("ScoreTokens", request, timeout=timeout)
    return [r.tolist() for r in codec.decode(reply.logprobs, "logprobs", "float32")]
