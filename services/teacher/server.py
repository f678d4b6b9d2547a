"""gRPC servicer of the teacher: translate `cascade.v1.TeacherService` messages <-> TeacherCore calls.

Thin by design: decode the ragged arrays (which names the field of a malformed one), call the core
in a worker thread, encode the answer. Errors are mapped to status codes by
services.common.grpc_server.
"""

from __future__ import annotations

import asyncio

from services.common import codec
from services.common.pb import common_pb2, teacher_pb2, teacher_pb2_grpc
from services.teacher.core import TeacherCore


class TeacherServicer(teacher_pb2_grpc.TeacherServiceServicer):
    def __init__(self, core: TeacherCore):
        self.core = core

    async def ScoreTokens(self, request: teacher_pb2.ScoreTokensRequest, context) -> teacher_pb2.ScoreTokensResponse:
        prompts = codec.decode(request.prompt_ids, "prompt_ids", "int32")
        completions = codec.decode(request.completion_ids, "completion_ids", "int32")
        temperature = request.temperature if request.HasField("temperature") else 1.0
        result = await asyncio.to_thread(
            self.core.score, request.domain, prompts, completions, list(request.prompt_index), request.top_k, temperature
        )
        scores = result.scores
        return teacher_pb2.ScoreTokensResponse(
            logprobs=codec.encode([s.logprobs for s in scores], "float32"),
            topk_ids=codec.encode([s.topk_ids for s in scores], "int32") if request.top_k else None,
            topk_logprobs=codec.encode([s.topk_logprobs for s in scores], "float32") if request.top_k else None,
            weight_version=result.weight_version,
        )

    async def LoadTeacher(self, request: teacher_pb2.LoadTeacherRequest, context) -> teacher_pb2.LoadTeacherResponse:
        teacher, seconds = await asyncio.to_thread(self.core.load_teacher, request.domain, request.uri, request.sha256)
        return teacher_pb2.LoadTeacherResponse(info=common_pb2.ModelInfo(**self.core.info(teacher)), load_seconds=seconds)

    async def ListTeachers(self, request: teacher_pb2.ListTeachersRequest, context) -> teacher_pb2.ListTeachersResponse:
        entries = [
            teacher_pb2.TeacherEntry(domain=t.domain, info=common_pb2.ModelInfo(**self.core.info(t)), uri=t.uri)
            for t in self.core.list_teachers()
        ]
        return teacher_pb2.ListTeachersResponse(teachers=entries)
