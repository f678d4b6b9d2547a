"""`cascade serve api` / `python -m services.api`: settings -> core -> FastAPI app -> uvicorn."""

from __future__ import annotations

import logging
import socket

import uvicorn
from pydantic import ValidationError

from services.api.app import build_app
from services.api.config import ApiSettings
from services.api.core import build_core
from services.common.logs import setup_logging
from services.common.settings import CommonSettings

log = logging.getLogger("services.api")


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (IPv4 or IPv6; port 0 picks a free one)."""
    family, kind, proto, _name, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    sock.listen(128)
    return sock


def _line(err: dict) -> str:
    """`CASCADE_API_PORT: Input should be ...`, or the message alone for whole-settings checks."""
    msg = err["msg"].removeprefix("Value error, ")
    return f"CASCADE_API_{'_'.join(map(str, err['loc'])).upper()}: {msg} (got {err.get('input')!r})" if err["loc"] else msg


def main() -> None:
    common = CommonSettings()
    setup_logging(common.log_level, common.log_format)
    try:
        settings = ApiSettings()
    except ValidationError as exc:
        raise SystemExit("error: " + "; ".join(_line(e) for e in exc.errors())) from None
    app = build_app(settings, build_core(settings.max_body_kb))
    sock = bind(settings.host, settings.port)
    port = sock.getsockname()[1]
    log.info("api ready", extra={"host": settings.host, "port": port, "auth": settings.token is not None,
                                 "url": f"http://{settings.host}:{port}/"})
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, timeout_graceful_shutdown=10))
    server.run(sockets=[sock])  # uvicorn stops gracefully on SIGTERM / SIGINT


if __name__ == "__main__":
    main()
