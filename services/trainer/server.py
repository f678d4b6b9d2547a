"""TrainerServicer: translates `cascade.v1.TrainerService` messages to Coordinator calls.

Blocking work (training, checkpoint and weight I/O) runs on one worker thread, so calls are
applied one at a time in arrival order and the event loop stays free for health checks. Until
the model is loaded (`attach`), every call is FAILED_PRECONDITION. Errors are raised as
`services.common.errors` and mapped to status codes by GrpcServer's interceptor.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from prometheus_client import Counter, Gauge, Histogram

from services.common.errors import Unavailable
from services.common.metrics import LATENCY_BUCKETS
from services.common.pb import common_pb2, trainer_pb2, trainer_pb2_grpc
from services.trainer.core import StepOptions, TrainerState
from services.trainer.distributed import Coordinator

STEP_SECONDS = Histogram("cascade_trainer_step_duration_seconds", "Time of one applied TrainStep.", ["loss"], buckets=LATENCY_BUCKETS)
LOSS = Gauge("cascade_trainer_loss", "Loss of the last applied TrainStep.", ["loss"])
TOKENS = Counter("cascade_trainer_tokens_total", "Trained (loss-mask) tokens of applied TrainSteps.", ["loss"])
STEPS = Counter("cascade_trainer_steps_total", "TrainStep calls by outcome (applied or replayed).", ["outcome"])
PUBLISH_SECONDS = Histogram("cascade_trainer_publish_duration_seconds", "Time to publish one weight version.", buckets=LATENCY_BUCKETS)
GLOBAL_STEP = Gauge("cascade_trainer_global_step", "Optimizer steps taken.")


def state_message(s: TrainerState) -> trainer_pb2.TrainerState:
    return trainer_pb2.TrainerState(
        global_step=s.global_step, weight_version=s.weight_version, data_cursor=s.data_cursor,
        applied_step_ids=s.applied_step_ids, learning_rate=s.learning_rate, model=s.model, world_size=s.world_size,
    )


class TrainerServicer(trainer_pb2_grpc.TrainerServiceServicer):
    def __init__(self):
        self.coordinator: Coordinator | None = None
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trainer")

    def attach(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator

    async def _call(self, method: str, *args):
        if self.coordinator is None:
            raise Unavailable("the trainer is still loading its model; retry when health is SERVING")
        fn = getattr(self.coordinator, method)
        return await asyncio.get_running_loop().run_in_executor(self.pool, lambda: fn(*args))

    async def TrainStep(self, request, context):
        start = time.perf_counter()
        lr = request.learning_rate if request.HasField("learning_rate") else None
        init = (request.init.uri, request.init.sha256) if request.HasField("init") else None
        options = StepOptions(
            weight_decay=request.weight_decay if request.HasField("weight_decay") else None,
            grad_clip=request.grad_clip if request.HasField("grad_clip") else None,
            packing=request.packing,
            share_prompts=request.share_prompts,
        )
        r = await self._call("train_step", request.step_id, request.loss, request.batch, request.params,
                             request.data_cursor, lr, request.reset_optimizer, init, options)
        STEPS.labels("replayed" if r.replayed else "applied").inc()
        if not r.replayed:
            STEP_SECONDS.labels(request.loss).observe(time.perf_counter() - start)
            LOSS.labels(request.loss).set(r.metrics["loss"])
            TOKENS.labels(request.loss).inc(r.metrics["tokens"])
            GLOBAL_STEP.set(r.global_step)
        return trainer_pb2.TrainStepResponse(metrics=r.metrics, global_step=r.global_step, replayed=r.replayed)

    async def SaveCheckpoint(self, request, context):
        tag, path, step = await self._call("save_checkpoint", request.tag)
        return trainer_pb2.CheckpointInfo(tag=tag, uri=str(path), global_step=step)

    async def LoadCheckpoint(self, request, context):
        return state_message(await self._call("load_checkpoint", request.tag))

    async def PublishWeights(self, request, context):
        p = await self._call("publish_weights")
        PUBLISH_SECONDS.observe(p.seconds)
        return common_pb2.WeightRef(version=p.version, uri=p.uri, sha256=p.sha256)

    async def StreamWeights(self, request, context):
        version, chunks = await self._call("chunks", request.version, request.chunk_bytes, request.from_path,
                                           request.from_offset)
        loop = asyncio.get_running_loop()
        while (c := await loop.run_in_executor(None, next, chunks, None)) is not None:
            yield trainer_pb2.WeightChunk(
                version=version, path=c.path, offset=c.offset, data=c.data, file_size=c.file_size, sha256=c.sha256
            )

    async def GetState(self, request, context):
        return state_message(await self._call("state"))
