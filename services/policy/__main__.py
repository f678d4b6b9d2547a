"""`cascade serve policy` / `python -m services.policy`: config -> core -> gRPC server -> serve."""

from __future__ import annotations

import asyncio
import logging

from services.common.grpc_server import GrpcServer
from services.common.logs import setup_logging
from services.common.pb import policy_pb2_grpc
from services.common.settings import CommonSettings
from services.policy.config import PolicyConfig
from services.policy.core import PolicyCore
from services.policy.server import PolicyServicer

log = logging.getLogger("services.policy")


async def serve(config: PolicyConfig) -> None:
    core = await asyncio.to_thread(PolicyCore.build, config)
    server = GrpcServer("policy", config)
    server.add(policy_pb2_grpc.add_PolicyServiceServicer_to_server, PolicyServicer(core), "cascade.v1.PolicyService")
    server.install_signal_handlers()
    port = await server.start()
    await server.set_serving(True)
    log.info("policy ready", extra={"port": port, **core.info()})
    try:
        await server.wait()
    finally:
        await asyncio.to_thread(core.close)  # vLLM: its engine-core process stops with the service


def main() -> None:
    common = CommonSettings()
    setup_logging(common.log_level, common.log_format)
    asyncio.run(serve(PolicyConfig()))


if __name__ == "__main__":
    main()
