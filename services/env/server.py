"""EnvServicer: the thin gRPC layer over EnvCore (messages in, core call, messages out).

Errors raised by the core (InvalidArgument, NotFound, FailedPrecondition, ResourceExhausted) become
status codes in the shared GrpcServer interceptor; this module knows nothing about environments.
"""

from __future__ import annotations

import asyncio
import json

from services.common.pb import common_pb2, env_pb2, env_pb2_grpc
from services.env.core import EnvCore

VERDICT_TO_PB = {
    "running": env_pb2.EPISODE_VERDICT_RUNNING,
    "ok": env_pb2.EPISODE_VERDICT_OK,
    "error": env_pb2.EPISODE_VERDICT_ERROR,
    "limit_turns": env_pb2.EPISODE_VERDICT_LIMIT_TURNS,
    "limit_deadline": env_pb2.EPISODE_VERDICT_LIMIT_DEADLINE,
    "limit_env_seconds": env_pb2.EPISODE_VERDICT_LIMIT_ENV_SECONDS,
    "closed": env_pb2.EPISODE_VERDICT_CLOSED,
}
PB_TO_VERDICT = {v: k for k, v in VERDICT_TO_PB.items()}


def to_messages(messages: list[dict]) -> list[common_pb2.ChatMessage]:
    return [common_pb2.ChatMessage(role=m["role"], content=m["content"]) for m in messages]


class EnvServicer(env_pb2_grpc.EnvServiceServicer):
    def __init__(self, core: EnvCore):
        self.core = core

    async def ListEnvironments(self, request, context) -> env_pb2.ListEnvironmentsResponse:
        return env_pb2.ListEnvironmentsResponse(environments=[
            env_pb2.EnvironmentInfo(name=name, description=env.description, tools=list(env.tool_names))
            for name, env in self.core.environments.items()
        ])

    async def OpenEpisode(self, request, context) -> env_pb2.OpenEpisodeResponse:
        opened = await asyncio.to_thread(self.core.open, request.environment, request.task_json,
                                         request.deadline_s, request.max_turns)
        return env_pb2.OpenEpisodeResponse(episode_id=opened.id, messages=to_messages(opened.messages),
                                           tools_json=json.dumps(opened.tools), deadline_s=opened.deadline_s,
                                           max_turns=opened.max_turns)

    async def Step(self, request, context) -> env_pb2.StepResponse:
        r = await asyncio.to_thread(self.core.step, request.episode_id, request.assistant_text)
        return env_pb2.StepResponse(messages=to_messages(r.messages), done=r.done, reward=r.reward,
                                    verdict=VERDICT_TO_PB[r.verdict], reason=r.reason, tool_errors=r.tool_errors,
                                    env_seconds=r.env_seconds, turns=r.turns)

    async def CloseEpisode(self, request, context) -> env_pb2.CloseEpisodeResponse:
        c = await asyncio.to_thread(self.core.close, request.episode_id)
        return env_pb2.CloseEpisodeResponse(reward=c.reward, verdict=VERDICT_TO_PB[c.verdict], reason=c.reason,
                                            turns=c.turns, env_seconds=c.env_seconds)
