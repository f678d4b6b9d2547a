"""gRPC server bootstrap shared by every service.

`GrpcServer` builds an asyncio server with: raised message-size limits, a bound on concurrent
calls (RESOURCE_EXHAUSTED beyond it), standard health checking (NOT_SERVING until the service says
its model is loaded), reflection (so `grpcurl` works), an optional bearer token and TLS (a bind
beyond loopback without a token is refused, the API's rule: services.common.tokens), Prometheus
RPC metrics, a uniform mapping of `services.common.errors` to status codes, and graceful shutdown
on SIGTERM / SIGINT. Servicers stay thin: they translate messages and call a core object.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import signal
import time
from collections.abc import Callable, Iterable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from services.common import errors
from services.common.handshakes import handshake_counter
from services.common.metrics import rpc_metrics, start_metrics_server
from services.common.settings import ServerSettings
from services.common.tokens import bearer, exposed_without_token, same_token

log = logging.getLogger(__name__)

_STATUS = [
    (errors.InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.ChecksumMismatch, grpc.StatusCode.DATA_LOSS),
    (errors.NotFound, grpc.StatusCode.NOT_FOUND),
    (errors.FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.ResourceExhausted, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (errors.Unavailable, grpc.StatusCode.UNAVAILABLE),
]


def status_for(exc: BaseException) -> grpc.StatusCode:
    """The gRPC status code a Cascade error maps to (INTERNAL for anything unexpected)."""
    for kind, code in _STATUS:
        if isinstance(exc, kind):
            return code
    return grpc.StatusCode.INTERNAL


def server_options(max_message_mb: int) -> list[tuple[str, int]]:
    limit = max_message_mb * 1024 * 1024
    return [
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", limit),
        ("grpc.so_reuseport", 0),
    ]


class _Undecodable:
    """Stands in for a request body the protobuf parser rejected (see `_lenient`)."""

    def __init__(self, reason: str):
        self.reason = reason


def _lenient(deserializer):
    """A request deserializer that returns `_Undecodable` instead of raising, so a malformed body
    becomes INVALID_ARGUMENT naming `request` (gRPC itself would answer UNKNOWN)."""
    if deserializer is None:
        return None

    def parse(data: bytes):
        try:
            return deserializer(data)
        except Exception as exc:
            return _Undecodable(f"{type(exc).__name__}: {exc}")

    return parse


def _check_decoded(request, method: str) -> None:
    if isinstance(request, _Undecodable):
        raise errors.InvalidArgument("request", f"is not a valid {method} request message ({request.reason})")


class _Interceptor(grpc.aio.ServerInterceptor):
    """Auth check, error mapping and metrics around every unary-unary / unary-stream handler."""

    def __init__(self, service: str, token: str | None):
        self.metrics = rpc_metrics(service)
        self.connections = handshake_counter(service)
        self.token = token

    async def intercept_service(self, continuation, details):
        handler = await continuation(details)
        if handler is None:
            return handler
        if details.method.startswith(("/grpc.health", "/grpc.reflection")):
            return self._seen_only(handler)
        method = details.method.rsplit("/", 1)[-1]
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                self._wrap_unary(handler.unary_unary, method),
                request_deserializer=_lenient(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                self._wrap_stream(handler.unary_stream, method),
                request_deserializer=_lenient(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        return handler

    def _seen_only(self, handler):
        """Health and reflection calls pass untouched but for noting their connection (handshakes)."""
        saw, codec = self.connections.saw, {"request_deserializer": handler.request_deserializer,
                                            "response_serializer": handler.response_serializer}
        if handler.unary_unary:
            behaviour = handler.unary_unary

            async def unary(request, context):
                saw(context.peer())
                return await behaviour(request, context)

            return grpc.unary_unary_rpc_method_handler(unary, **codec)
        streaming = handler.unary_stream or handler.stream_stream
        if streaming is None:
            return handler
        if inspect.isasyncgenfunction(streaming):  # reflection yields its answers

            async def stream(request, context):
                saw(context.peer())
                async for item in streaming(request, context):
                    yield item
        else:  # health's Watch writes them with context.write

            async def stream(request, context):
                saw(context.peer())
                return await streaming(request, context)

        make = grpc.unary_stream_rpc_method_handler if handler.unary_stream else grpc.stream_stream_rpc_method_handler
        return make(stream, **codec)

    async def _check_auth(self, context) -> None:
        self.connections.saw(context.peer())
        if self.token is None:
            return
        meta = dict(context.invocation_metadata() or ())
        if not same_token(bearer(meta.get("authorization")), self.token):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")

    def _observe(self, method: str, code: grpc.StatusCode, start: float) -> None:
        self.metrics.latency.labels(method, code.name).observe(time.perf_counter() - start)
        if code is not grpc.StatusCode.OK:
            self.metrics.errors.labels(method, code.name).inc()

    async def _fail(self, context, method: str, exc: Exception) -> grpc.StatusCode:
        code = status_for(exc)
        if code is grpc.StatusCode.INTERNAL:
            log.exception("unexpected error in %s", method, extra={"method": method})
            message = f"{type(exc).__name__}: {exc}"
        else:
            message = str(exc)
        context.set_code(code)
        context.set_details(message.splitlines()[0][:2000] if message else code.name)
        return code

    def _wrap_unary(self, behaviour, method):
        async def wrapped(request, context):
            start = time.perf_counter()
            self.metrics.in_flight.inc()
            code = grpc.StatusCode.OK
            try:
                await self._check_auth(context)
                _check_decoded(request, method)
                return await behaviour(request, context)
            except asyncio.CancelledError:
                code = grpc.StatusCode.CANCELLED
                raise
            except grpc.aio.AbortError:
                code = context.code() or grpc.StatusCode.UNKNOWN
                raise
            except Exception as exc:  # mapped to a status, never a crash
                code = await self._fail(context, method, exc)
                return None
            finally:
                self.metrics.in_flight.dec()
                self._observe(method, code, start)

        return wrapped

    def _wrap_stream(self, behaviour, method):
        async def wrapped(request, context):
            start = time.perf_counter()
            self.metrics.in_flight.inc()
            code = grpc.StatusCode.OK
            try:
                await self._check_auth(context)
                _check_decoded(request, method)
                async for item in behaviour(request, context):
                    yield item
            except asyncio.CancelledError:
                code = grpc.StatusCode.CANCELLED
                raise
            except grpc.aio.AbortError:
                code = context.code() or grpc.StatusCode.UNKNOWN
                raise
            except Exception as exc:
                code = await self._fail(context, method, exc)
            finally:
                self.metrics.in_flight.dec()
                self._observe(method, code, start)

        return wrapped


class GrpcServer:
    """One asyncio gRPC server hosting one or more servicers of a Cascade service.

    Usage (in a service's __main__): `server = GrpcServer("policy", settings)`,
    `server.add(add_PolicyServiceServicer_to_server, servicer, "cascade.v1.PolicyService")`,
    `await server.start()`, load the model, `server.set_serving(True)`, `await server.wait()`.
    """

    def __init__(self, service: str, settings: ServerSettings):
        prefix = settings.model_config.get("env_prefix") or f"CASCADE_{service.upper()}_"
        refusal = exposed_without_token(settings.host, settings.auth_token, prefix + "AUTH_TOKEN", prefix + "HOST")
        if refusal:
            raise errors.FailedPrecondition(refusal)
        self.service = service
        self.settings = settings
        self.server = grpc.aio.server(
            interceptors=[_Interceptor(service, settings.auth_token)],
            options=server_options(settings.max_message_mb),
            maximum_concurrent_rpcs=settings.max_concurrent_rpcs,
        )
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.names: list[str] = []
        self.port: int | None = None
        self.metrics_port: int | None = None
        self._stopping = asyncio.Event()

    def add(self, adder: Callable, servicer: object, full_name: str) -> None:
        """Register a servicer (`adder` is the generated add_*Servicer_to_server)."""
        adder(servicer, self.server)
        self.names.append(full_name)

    async def start(self) -> int:
        """Bind, start serving (health NOT_SERVING) and return the bound port."""
        s = self.settings
        reflection.enable_server_reflection([*self.names, reflection.SERVICE_NAME, health.SERVICE_NAME], self.server)
        address = f"{s.host}:{s.port}"
        if s.tls_cert and s.tls_key:
            certificates = grpc.ssl_server_certificate_configuration(
                [(s.tls_key.read_bytes(), s.tls_cert.read_bytes())],
                root_certificates=s.tls_client_ca.read_bytes() if s.tls_client_ca else None,
            )
            # the fetcher runs at every handshake's start: how refused handshakes are counted
            creds = grpc.dynamic_ssl_server_credentials(certificates, handshake_counter(self.service).fetch,
                                                        require_client_authentication=s.tls_client_ca is not None)
            self.port = self.server.add_secure_port(address, creds)
        else:
            self.port = self.server.add_insecure_port(address)
        if not self.port:
            raise OSError(f"could not bind gRPC port {address}")
        await self.server.start()
        await self._set_status(health_pb2.HealthCheckResponse.NOT_SERVING)
        if s.metrics_port is not None:
            self.metrics_port = start_metrics_server(s.metrics_port, s.host)
        log.info(
            "serving",
            extra={"service": self.service, "address": f"{s.host}:{self.port}", "metrics_port": self.metrics_port},
        )
        return self.port

    async def set_serving(self, serving: bool = True) -> None:
        """Flip health to SERVING once the model (or whatever the service needs) is ready."""
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        await self._set_status(status)

    async def _set_status(self, status) -> None:
        for name in ["", *self.names]:
            await self.health.set(name, status)

    def install_signal_handlers(self, signals: Iterable[int] = (signal.SIGTERM, signal.SIGINT)) -> None:
        loop = asyncio.get_running_loop()
        for sig in signals:
            loop.add_signal_handler(sig, self._stopping.set)

    async def wait(self) -> None:
        """Serve until SIGTERM/SIGINT (when handlers are installed) or `stop()`; then shut down."""
        await self._stopping.wait()
        await self.shutdown()

    def request_stop(self) -> None:
        self._stopping.set()

    async def shutdown(self) -> None:
        """Graceful stop: health NOT_SERVING, in-flight calls get `grace_seconds` to finish."""
        await self.health.enter_graceful_shutdown()
        await self.server.stop(self.settings.grace_seconds)
        log.info("stopped", extra={"service": self.service})
