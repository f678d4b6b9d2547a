"""HandshakeCounter: one count per connection (by peer address), handshakes counted by the fetcher.
The refused handshakes of a real TLS server are in tests/reliability/test_security.py."""

from __future__ import annotations

import itertools

from prometheus_client import REGISTRY

from services.common.handshakes import HandshakeCounter

_names = itertools.count()


def counter(remember: int = 4096) -> tuple[HandshakeCounter, str]:
    service = f"handshake_unit_{next(_names)}"
    return HandshakeCounter(service, remember=remember), service


def value(service: str, what: str) -> float:
    return REGISTRY.get_sample_value(f"cascade_{service}_{what}_total")


def test_a_connection_counts_once_however_many_calls_it_carries():
    c, service = counter()
    for peer in ["ipv4:10.0.0.3:40000", "ipv4:10.0.0.3:40000", "ipv4:10.0.0.4:40000", None, ""]:
        c.saw(peer)
    assert value(service, "connections") == 2


def test_the_fetcher_counts_handshakes_and_keeps_the_certificate():
    c, service = counter()
    assert c.fetch() is None and c.fetch() is None
    assert value(service, "tls_handshakes") == 2 and value(service, "connections") == 0


def test_a_peer_forgotten_after_remember_others_counts_again():
    c, service = counter(remember=2)
    for peer in ["a:1", "b:1", "a:1", "c:1", "b:1", "a:1"]:  # a is kept by its call; b falls out, then a
        c.saw(peer)
    assert value(service, "connections") == 5
