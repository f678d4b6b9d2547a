"""RewardServicer: the thin gRPC layer over RewardCore (messages in, core call, messages out).

Errors raised by the core (InvalidArgument, ResourceExhausted) become status codes in the shared
GrpcServer interceptor; this module knows nothing about verifiers.
"""

from __future__ import annotations

import asyncio
import time

from services.common.pb import reward_pb2, reward_pb2_grpc
from services.common.verdicts import PB_TO_VERDICT, VERDICT_TO_PB  # noqa: F401  (the one table; PB_TO_VERDICT for reward.cli)
from services.reward.core import RewardCore, ScoredItem


def to_pb(item: ScoredItem) -> reward_pb2.ScoreResult:
    o = item.outcome
    return reward_pb2.ScoreResult(
        reward=o.reward, verdict=VERDICT_TO_PB[o.verdict], reason=o.reason, seconds=item.seconds,
        checks=[reward_pb2.Check(name=c.name, passed=c.passed, detail=c.detail) for c in o.checks],
    )


class RewardServicer(reward_pb2_grpc.RewardServiceServicer):
    def __init__(self, core: RewardCore):
        self.core = core

    async def Score(self, request: reward_pb2.ScoreRequest, context) -> reward_pb2.ScoreResponse:
        items = [(it.task_json, it.response) for it in request.items]
        remaining = context.time_remaining()
        scored = await asyncio.to_thread(self.core.score, items, remaining)
        return reward_pb2.ScoreResponse(results=[to_pb(s) for s in scored])

    async def LoadRewardModel(self, request, context) -> reward_pb2.LoadRewardModelResponse:
        start = time.perf_counter()
        uri = await asyncio.to_thread(self.core.load_reward_model, request.uri, request.sha256)
        return reward_pb2.LoadRewardModelResponse(uri=uri, load_seconds=time.perf_counter() - start)
