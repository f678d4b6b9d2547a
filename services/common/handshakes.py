"""Counting the TLS handshakes a service refused.

A caller without TLS, with a certificate from another CA or with no client certificate is turned
away by gRPC's C core during the handshake, before any Python code sees a call: the interceptor's
RPC metrics never hear of it. Two things are visible from Python, and their difference is the count:

- the server's certificate fetcher (`grpc.dynamic_ssl_server_credentials`) runs once at the start
  of every handshake: `cascade_<service>_tls_handshakes_total` counts handshakes begun;
- a connection whose handshake succeeded shows itself by its calls, each carrying the connection's
  peer address: `cascade_<service>_connections_total` counts connections that carried a call, by
  the first call seen from each peer address.

    refused handshakes = handshakes begun − connections that carried a call

(a connection that completes its handshake and then never calls counts as refused; a plaintext
server begins no handshakes, so the difference is never positive there). The Services dashboard
draws it per service, beside the token refusals (RPC errors with code UNAUTHENTICATED).
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict

from prometheus_client import Counter


class HandshakeCounter:
    """Counts handshakes begun (`fetch`, the certificate fetcher) and connections seen (`saw`)."""

    def __init__(self, service: str, remember: int = 4096):
        self.handshakes = Counter(f"cascade_{service}_tls_handshakes_total",
                                  f"TLS handshakes begun by callers of {service} (refused ones included).")
        self.connections = Counter(f"cascade_{service}_connections_total",
                                   f"Connections to {service} that carried at least one call.")
        self._peers: OrderedDict[str, None] = OrderedDict()
        self._remember = remember
        self._lock = threading.Lock()

    def fetch(self) -> None:
        """The certificate fetcher: count one handshake; None keeps the server's certificate as is."""
        self.handshakes.inc()
        return None

    def saw(self, peer: str | None) -> None:
        """Count `peer` (e.g. `ipv4:10.0.0.3:45678`) once: the first call of a connection.

        The last `remember` peer addresses are kept: a new connection from an address still kept is
        not counted (a source port reused that soon is rare), and a connection quiet for `remember`
        other connections counts again when it calls."""
        if not peer:
            return
        with self._lock:
            if peer in self._peers:
                self._peers.move_to_end(peer)
                return
            self._peers[peer] = None
            if len(self._peers) > self._remember:
                self._peers.popitem(last=False)
        self.connections.inc()


@functools.cache
def handshake_counter(service: str) -> HandshakeCounter:
    """The process-wide HandshakeCounter of `service` (created on first use)."""
    return HandshakeCounter(service)
