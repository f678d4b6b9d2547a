"""gRPC servicer of the policy: translate `cascade.v1.PolicyService` messages <-> PolicyCore calls.

Thin by design: no validation beyond decoding bytes, no model code. Blocking work runs in a worker
thread so health checks and other calls stay responsive; errors raised by the core are mapped to
status codes by services.common.grpc_server.
"""

from __future__ import annotations

import asyncio

import numpy as np

from services.common import codec
from services.common.errors import InvalidArgument
from services.common.pb import common_pb2, policy_pb2, policy_pb2_grpc
from services.policy.backends.base import FINISH_LENGTH, SamplingConfig
from services.policy.core import Chat, PolicyCore, Prompt

_FINISH = {FINISH_LENGTH: policy_pb2.FINISH_REASON_LENGTH}


def prompt_from_proto(prompt: policy_pb2.Prompt, index: int) -> Prompt:
    """A Prompt message -> Chat or int32 token ids."""
    kind = prompt.WhichOneof("kind")
    if kind == "conversation":
        return Chat([{"role": m.role, "content": m.content} for m in prompt.conversation.messages])
    if kind == "token_ids":
        if len(prompt.token_ids) % 4:
            raise InvalidArgument(f"prompts[{index}].token_ids", f"holds {len(prompt.token_ids)} bytes, not a multiple of 4 (int32)")
        return np.frombuffer(prompt.token_ids, dtype="<i4")
    raise InvalidArgument(f"prompts[{index}]", "sets neither conversation nor token_ids")


def sampling_from_proto(s: policy_pb2.SamplingParams) -> SamplingConfig:
    """SamplingParams message -> SamplingConfig, with the proto's defaults for unset fields."""
    return SamplingConfig(
        max_tokens=s.max_tokens,
        temperature=s.temperature if s.HasField("temperature") else 1.0,
        top_p=s.top_p if s.HasField("top_p") else 1.0,
        top_k=s.top_k,
        stop=tuple(s.stop),
        seed=s.seed if s.HasField("seed") else None,
    )


def model_info(info: dict) -> common_pb2.ModelInfo:
    return common_pb2.ModelInfo(**info)


class PolicyServicer(policy_pb2_grpc.PolicyServiceServicer):
    def __init__(self, core: PolicyCore):
        self.core = core

    async def Generate(self, request: policy_pb2.GenerateRequest, context) -> policy_pb2.GenerateResponse:
        prompts = [prompt_from_proto(p, i) for i, p in enumerate(request.prompts)]
        sampling = sampling_from_proto(request.sampling)
        result = await asyncio.to_thread(self.core.generate, prompts, request.n, sampling, request.sampling.thinking)
        samples = result.samples
        return policy_pb2.GenerateResponse(
            prompt_token_ids=codec.encode(result.prompt_token_ids, "int32"),
            token_ids=codec.encode([s.token_ids for s in samples], "int32"),
            logprobs=codec.encode([s.logprobs for s in samples], "float32"),
            texts=[s.text for s in samples],
            finish_reasons=[_FINISH.get(s.finish_reason, policy_pb2.FINISH_REASON_STOP) for s in samples],
            weight_version=result.weight_version,
        )

    async def LoadWeights(self, request: policy_pb2.LoadWeightsRequest, context) -> policy_pb2.LoadWeightsResponse:
        w = request.weights
        seconds = await asyncio.to_thread(self.core.load_weights, w.version, w.uri, w.sha256)
        return policy_pb2.LoadWeightsResponse(weight_version=w.version, load_seconds=seconds)

    async def GetInfo(self, request: policy_pb2.GetInfoRequest, context) -> common_pb2.ModelInfo:
        return model_info(self.core.info())
