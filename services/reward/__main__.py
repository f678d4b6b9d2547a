"""`cascade serve reward`: config → RewardCore → GrpcServer → serve until SIGTERM."""

from __future__ import annotations

import asyncio

from services.common.grpc_server import GrpcServer
from services.common.logs import setup_logging
from services.common.pb import reward_pb2_grpc
from services.common.settings import CommonSettings
from services.reward.config import RewardConfig
from services.reward.core import RewardCore
from services.reward.server import RewardServicer


async def serve(config: RewardConfig) -> None:
    core = RewardCore(config)
    server = GrpcServer("reward", config)
    server.add(reward_pb2_grpc.add_RewardServiceServicer_to_server, RewardServicer(core), "cascade.v1.RewardService")
    await server.start()
    server.install_signal_handlers()
    await asyncio.to_thread(core.warm_up)
    await server.set_serving(True)
    try:
        await server.wait()
    finally:
        core.close()


def main() -> None:
    common = CommonSettings()
    setup_logging(common.log_level, common.log_format)
    asyncio.run(serve(RewardConfig()))


if __name__ == "__main__":
    main()
