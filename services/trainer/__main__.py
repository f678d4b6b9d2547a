"""`cascade serve trainer` / `python -m services.trainer`: config -> core -> gRPC (rank 0) or follow (ranks > 0).

Several ranks: start one process per rank with MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE and
LOCAL_RANK set (torchrun or the deepspeed launcher do this); rank 0 serves, the others follow.
"""

from __future__ import annotations

import asyncio
import logging

from services.common.grpc_server import GrpcServer
from services.common.logs import setup_logging
from services.common.pb import trainer_pb2_grpc
from services.common.settings import CommonSettings
from services.trainer.config import TrainerConfig
from services.trainer.core import TrainerCore
from services.trainer.distributed import Coordinator, follow
from services.trainer.server import TrainerServicer

log = logging.getLogger("services.trainer")


async def serve(cfg: TrainerConfig) -> None:
    servicer = TrainerServicer()
    server = GrpcServer("trainer", cfg)
    server.add(trainer_pb2_grpc.add_TrainerServiceServicer_to_server, servicer, "cascade.v1.TrainerService")
    await server.start()
    server.install_signal_handlers()
    loop = asyncio.get_running_loop()
    core = await loop.run_in_executor(servicer.pool, TrainerCore, cfg)
    coordinator = Coordinator(core)
    if cfg.resume:
        await loop.run_in_executor(servicer.pool, coordinator.resume, cfg.resume)
    servicer.attach(coordinator)
    await server.set_serving(True)
    log.info("trainer ready", extra={"port": server.port, "world_size": core.world, "global_step": core.engine.global_step})
    try:
        await server.wait()
    finally:
        await loop.run_in_executor(servicer.pool, coordinator.shutdown)


def main() -> None:
    common = CommonSettings()
    setup_logging(common.log_level, common.log_format)
    cfg = TrainerConfig()
    if not cfg.model:
        raise ValueError("CASCADE_TRAINER_MODEL is not set; point it at an HF model directory")
    from services.trainer.engine import start_rank

    rank, _ = start_rank(cfg)
    if rank == 0:
        asyncio.run(serve(cfg))
    else:
        follow(TrainerCore(cfg))  # a resume is broadcast by rank 0 like any other command


if __name__ == "__main__":
    main()
