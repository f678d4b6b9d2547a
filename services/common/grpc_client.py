"""gRPC client helper: a deadline on every call, retry with backoff, and fail-over across replicas.

`ReplicaClient(["host:5001", "host:5002"], PolicyServiceStub)` keeps one channel per replica and
starts each call on the next replica (round-robin). A call that fails with UNAVAILABLE (replica
down) or RESOURCE_EXHAUSTED (replica busy) moves on to the next replica; after every replica has
failed it sleeps with exponential backoff and tries again, up to `attempts` rounds. Any other
status is the server's answer and is raised at once as `grpc.RpcError`.
"""

from __future__ import annotations

import itertools
import logging
import random
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

log = logging.getLogger(__name__)

RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED})


@dataclass(frozen=True)
class ClientOptions:
    """How a client talks to a service."""

    timeout: float = 60.0
    """Deadline of one call attempt, in seconds."""
    attempts: int = 4
    """Rounds over all replicas before giving up on UNAVAILABLE / RESOURCE_EXHAUSTED."""
    backoff: float = 0.2
    """First sleep between rounds (seconds); doubles each round, with jitter, up to max_backoff."""
    max_backoff: float = 5.0
    max_message_mb: int = 256
    token: str | None = None
    """Bearer token sent as `authorization` metadata (servers with auth_token set require it)."""
    tls_ca: Path | None = None
    """PEM CA bundle to verify the server; setting it switches the channel to TLS."""
    tls_cert: Path | None = None
    """Client certificate for mutual TLS."""
    tls_key: Path | None = None


def parse_addresses(addresses: str | Sequence[str]) -> list[str]:
    """Accept "h:p", "h:p,h:p" or a list; strip blanks; reject an empty list."""
    items = addresses.split(",") if isinstance(addresses, str) else list(addresses)
    out = [a.strip() for a in items if a and a.strip()]
    if not out:
        raise ValueError("no service address given (expected host:port, comma-separated for replicas)")
    for a in out:
        host, sep, port = a.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"service address {a!r} is not host:port")
    return out


def _channel(address: str, opts: ClientOptions) -> grpc.Channel:
    limit = opts.max_message_mb * 1024 * 1024
    options = [("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", limit)]
    if opts.tls_ca is None:
        return grpc.insecure_channel(address, options=options)
    creds = grpc.ssl_channel_credentials(
        root_certificates=opts.tls_ca.read_bytes(),
        private_key=opts.tls_key.read_bytes() if opts.tls_key else None,
        certificate_chain=opts.tls_cert.read_bytes() if opts.tls_cert else None,
    )
    return grpc.secure_channel(address, creds, options=options)


class ReplicaClient:
    """A stub over a list of replicas with deadlines, retries and fail-over (thread-safe)."""

    def __init__(self, addresses: str | Sequence[str], stub_class, options: ClientOptions | None = None):
        self.addresses = parse_addresses(addresses)
        self.options = options or ClientOptions()
        self._channels = [_channel(a, self.options) for a in self.addresses]
        self._stubs = [stub_class(ch) for ch in self._channels]
        self._next = itertools.count()
        self._lock = threading.Lock()

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.options.token}"),) if self.options.token else ()

    def _order(self) -> list[int]:
        with self._lock:
            start = next(self._next) % len(self._stubs)
        return [(start + i) % len(self._stubs) for i in range(len(self._stubs))]

    def call(self, method: str, request, timeout: float | None = None):
        """Call unary `method` (e.g. "Generate") with retry and fail-over; return the response."""
        return self._with_retry(method, lambda stub, t: getattr(stub, method)(request, timeout=t, metadata=self.metadata), timeout)

    def call_each(self, method: str, request, timeout: float | None = None) -> list:
        """Call unary `method` on every replica (e.g. LoadTeacher: each replica must hold the same
        state); each call has its own retries on its own replica. Returns the replies in address order."""
        def attempt(stub, t):
            return getattr(stub, method)(request, timeout=t, metadata=self.metadata)

        return [self._with_retry(method, attempt, timeout, order=[i]) for i in range(len(self._stubs))]

    def stream(self, method: str, request, timeout: float | None = None) -> Iterator:
        """Call unary-stream `method`; fail-over happens only before the first message arrives."""

        def first(stub, t):
            it = getattr(stub, method)(request, timeout=t, metadata=self.metadata)
            head = next(it, None)
            return head, it

        head, rest = self._with_retry(method, first, timeout)
        if head is not None:
            yield head
            yield from rest

    def _with_retry(self, method: str, attempt, timeout: float | None, order: list[int] | None = None):
        t = timeout if timeout is not None else self.options.timeout
        delay = self.options.backoff
        last: grpc.RpcError | None = None
        for round_ in range(self.options.attempts):
            tried = order if order is not None else self._order()
            for n, i in enumerate(tried):
                try:
                    return attempt(self._stubs[i], t)
                except grpc.RpcError as err:
                    if err.code() not in RETRYABLE:
                        raise
                    last = err
                    if n + 1 < len(tried):
                        log.warning(f"{method} on {self.addresses[i]} failed ({err.code().name}); trying the next replica",
                                    extra={"method": method, "address": self.addresses[i], "code": err.code().name})
            if round_ + 1 < self.options.attempts:
                pause = min(delay, self.options.max_backoff) * (0.5 + random.random())
                where = self.addresses[tried[0]] if len(tried) == 1 else f"all {len(tried)} replicas"
                log.warning(f"{method} on {where} failed ({last.code().name}); retrying in {pause:.1f}s "
                            f"(round {round_ + 2} of {self.options.attempts})",
                            extra={"method": method, "code": last.code().name, "retry_in_s": round(pause, 2)})
                time.sleep(pause)
                delay *= 2
        assert last is not None
        raise last

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until every replica's health check says SERVING, or raise TimeoutError."""
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        deadline = time.monotonic() + timeout
        for address, channel in zip(self.addresses, self._channels):
            stub = health_pb2_grpc.HealthStub(channel)
            while True:
                try:
                    reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=2.0, metadata=self.metadata)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        break
                except grpc.RpcError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{address} not SERVING after {timeout:.0f}s")
                time.sleep(0.1)

    def close(self) -> None:
        for ch in self._channels:
            ch.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
