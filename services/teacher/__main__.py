"""`cascade serve teacher` / `python -m services.teacher`: config -> core (+ start-up teachers) -> gRPC server -> serve."""

from __future__ import annotations

import asyncio
import logging

from services.common.grpc_server import GrpcServer
from services.common.logs import setup_logging
from services.common.pb import teacher_pb2_grpc
from services.common.settings import CommonSettings
from services.teacher.config import TeacherConfig
from services.teacher.core import TeacherCore
from services.teacher.server import TeacherServicer

log = logging.getLogger("services.teacher")


async def serve(config: TeacherConfig) -> None:
    core = TeacherCore(config)
    server = GrpcServer("teacher", config)
    server.add(teacher_pb2_grpc.add_TeacherServiceServicer_to_server, TeacherServicer(core), "cascade.v1.TeacherService")
    server.install_signal_handlers()
    await asyncio.to_thread(core.restore)  # before listening: a restarted replica never answers without them
    port = await server.start()
    for domain, uri in config.teachers.items():
        await asyncio.to_thread(core.load_teacher, domain, uri)
    await server.set_serving(True)
    log.info("teacher ready", extra={"port": port, "domains": sorted(core.teachers)})
    try:
        await server.wait()
    finally:
        await asyncio.to_thread(core.close)  # vLLM: its engine-core process stops with the service


def main() -> None:
    common = CommonSettings()
    setup_logging(common.log_level, common.log_format)
    asyncio.run(serve(TeacherConfig()))


if __name__ == "__main__":
    main()
