"""Prometheus metrics helpers: names follow `cascade_<service>_<what>_<unit>` (DESIGN.md section 7)."""

from __future__ import annotations

import functools

from prometheus_client import Counter, Gauge, Histogram, start_http_server

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class RpcMetrics:
    """Per-RPC latency and error metrics of one service, labelled by method and status code."""

    def __init__(self, service: str):
        self.latency = Histogram(
            f"cascade_{service}_rpc_duration_seconds",
            f"Latency of {service} RPCs, by method and status code.",
            ["method", "code"],
            buckets=LATENCY_BUCKETS,
        )
        self.errors = Counter(
            f"cascade_{service}_rpc_errors_total",
            f"{service} RPCs that ended with a non-OK status, by method and code.",
            ["method", "code"],
        )
        self.in_flight = Gauge(
            f"cascade_{service}_rpc_in_flight",
            f"{service} RPCs being served right now.",
        )


@functools.cache
def rpc_metrics(service: str) -> RpcMetrics:
    """The process-wide RpcMetrics of `service` (created on first use)."""
    return RpcMetrics(service)


def start_metrics_server(port: int, host: str = "127.0.0.1") -> int:
    """Serve /metrics on `port` (0 picks a free one); return the port actually bound."""
    server, _thread = start_http_server(port, addr=host)
    return server.server_address[1]
