"""Malformed and oversized gRPC messages to every service: a status code each, never a crash.

Random bytes, mutated valid requests, an empty body and a body above max_message_mb go through a
generic channel with identity serializers to every method. Each call gets a deliberate status
(undecodable bytes are INVALID_ARGUMENT naming `request`); none is INTERNAL or UNKNOWN, which
would mean an exception nobody mapped; the process is the same one afterwards and SERVING.
"""

from __future__ import annotations

import pytest

from tests.reliability.probes import fuzz_service

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.parametrize("name", ["policy", "teacher", "reward", "trainer"])
def test_malformed_and_oversized_messages_get_a_status_and_the_service_keeps_serving(services, name):
    sup, specs = services
    pid = sup.pid(name)
    result = fuzz_service(name, specs[name].grpc_address, seed=hash(name) % 1000, pid=pid)
    assert result.unexpected == [], result.unexpected
    assert result.codes["RESOURCE_EXHAUSTED"] >= 1, f"the oversized body was not refused: {result.codes}"
    assert result.codes["INVALID_ARGUMENT"] >= result.sent // 3, result.codes
    assert result.health_after == "SERVING"
    assert sup.pid(name) == pid, f"{name} crashed and was restarted"
