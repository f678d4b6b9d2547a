"""`cascade serve env`: config → EnvCore → GrpcServer → serve until SIGTERM."""

from __future__ import annotations

import asyncio

from services.common.grpc_server import GrpcServer
from services.common.logs import setup_logging
from services.common.pb import env_pb2_grpc
from services.common.settings import CommonSettings
from services.env.config import EnvConfig
from services.env.core import EnvCore
from services.env.server import EnvServicer


async def serve(config: EnvConfig) -> None:
    server = GrpcServer("env", config)
    core = await asyncio.to_thread(EnvCore, config)
    server.add(env_pb2_grpc.add_EnvServiceServicer_to_server, EnvServicer(core), "cascade.v1.EnvService")
    await server.start()
    server.install_signal_handlers()
    await server.set_serving(True)
    try:
        await server.wait()
    finally:
        await asyncio.to_thread(core.close_all)


def main() -> None:
    common = CommonSettings()
    setup_logging(common.log_level, common.log_format)
    asyncio.run(serve(EnvConfig()))


if __name__ == "__main__":
    main()
