"""The shared gRPC server bootstrap and client helper, over real loopback sockets.

A small test servicer (the reward contract, with behaviour chosen by the response text) is
served by `GrpcServer`; everything else is the production code path.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from services.common.errors import InvalidArgument
from services.common.grpc_client import ClientOptions, ReplicaClient, parse_addresses
from services.common.grpc_server import GrpcServer
from services.common.pb import reward_pb2, reward_pb2_grpc
from services.common.settings import ServerSettings
from services.common.supervisor import free_port
from tests.loop_thread import LoopThread

pytestmark = pytest.mark.integration
SERVICE = "cascade.v1.RewardService"


class EchoServicer(reward_pb2_grpc.RewardServiceServicer):
    def __init__(self, tag: str):
        self.tag = tag

    async def Score(self, request, context):
        results = []
        for item in request.items:
            if item.response == "bad":
                raise InvalidArgument("items[0].response", "must not be 'bad'")
            if item.response == "boom":
                raise RuntimeError("verifier exploded")
            if item.response.startswith("sleep:"):
                await asyncio.sleep(float(item.response.split(":")[1]))
            results.append(reward_pb2.ScoreResult(reward=1.0, reason=self.tag))
        return reward_pb2.ScoreResponse(results=results)



@pytest.fixture
def loop():
    lt = LoopThread()
    yield lt
    lt.close()


def start_server(loop, tag="a", serving=True, **settings):
    async def build():
        server = GrpcServer("test", ServerSettings(**settings))
        server.add(reward_pb2_grpc.add_RewardServiceServicer_to_server, EchoServicer(tag), SERVICE)
        await server.start()
        if serving:
            await server.set_serving(True)
        return server

    return loop.run(build())


def score(client: ReplicaClient, response: str = "ok", timeout: float | None = None):
    req = reward_pb2.ScoreRequest(items=[reward_pb2.ScoreItem(task_json="{}", response=response)])
    return client.call("Score", req, timeout=timeout)


def test_health_flips_to_serving_and_reflection_lists_the_service(loop):
    server = start_server(loop, serving=False)
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    health = health_pb2_grpc.HealthStub(channel)
    status = health.Check(health_pb2.HealthCheckRequest(service=SERVICE), timeout=5).status
    assert status == health_pb2.HealthCheckResponse.NOT_SERVING
    watch = health.Watch(health_pb2.HealthCheckRequest(service=SERVICE), timeout=10)
    assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
    loop.run(server.set_serving(True))
    assert next(watch).status == health_pb2.HealthCheckResponse.SERVING  # Watch streams the change
    watch.cancel()
    status = health.Check(health_pb2.HealthCheckRequest(service=SERVICE), timeout=5).status
    assert status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(channel)
    reply = next(refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5))
    assert SERVICE in {s.name for s in reply.list_services_response.service}
    loop.run(server.shutdown())


def test_errors_map_to_status_codes_and_the_server_keeps_serving(loop):
    server = start_server(loop)
    with ReplicaClient(f"127.0.0.1:{server.port}", reward_pb2_grpc.RewardServiceStub) as client:
        with pytest.raises(grpc.RpcError) as bad:
            score(client, "bad")
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "items[0].response" in bad.value.details()
        with pytest.raises(grpc.RpcError) as boom:
            score(client, "boom")
        assert boom.value.code() == grpc.StatusCode.INTERNAL
        assert "verifier exploded" in boom.value.details()
        assert score(client).results[0].reward == 1.0
    loop.run(server.shutdown())


def test_bearer_token_is_required_when_configured(loop):
    server = start_server(loop, auth_token="s3cret")
    address = f"127.0.0.1:{server.port}"
    with ReplicaClient(address, reward_pb2_grpc.RewardServiceStub) as anonymous:
        with pytest.raises(grpc.RpcError) as info:
            score(anonymous)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with ReplicaClient(address, reward_pb2_grpc.RewardServiceStub, ClientOptions(token="wrong")) as wrong:
        with pytest.raises(grpc.RpcError):
            score(wrong)
    with ReplicaClient(address, reward_pb2_grpc.RewardServiceStub, ClientOptions(token="s3cret")) as good:
        assert score(good).results[0].reward == 1.0
    loop.run(server.shutdown())


def test_concurrency_bound_answers_resource_exhausted(loop):
    server = start_server(loop, max_concurrent_rpcs=1)
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    stub = reward_pb2_grpc.RewardServiceStub(channel)
    slow = stub.Score.future(reward_pb2.ScoreRequest(items=[reward_pb2.ScoreItem(response="sleep:1.0")]), timeout=10)
    time.sleep(0.3)
    with pytest.raises(grpc.RpcError) as info:
        stub.Score(reward_pb2.ScoreRequest(items=[reward_pb2.ScoreItem(response="ok")]), timeout=5)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert slow.result().results[0].reward == 1.0
    loop.run(server.shutdown())


def test_metrics_endpoint_exports_rpc_latency_and_errors(loop):
    server = start_server(loop, metrics_port=0)
    with ReplicaClient(f"127.0.0.1:{server.port}", reward_pb2_grpc.RewardServiceStub) as client:
        score(client)
        with pytest.raises(grpc.RpcError):
            score(client, "bad")
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5).read().decode()
    assert 'cascade_test_rpc_duration_seconds_count{code="OK",method="Score"}' in text
    assert 'cascade_test_rpc_errors_total{code="INVALID_ARGUMENT",method="Score"}' in text
    loop.run(server.shutdown())


def test_client_fails_over_from_a_dead_replica_and_round_robins(loop):
    a, b = start_server(loop, tag="a"), start_server(loop, tag="b")
    dead = f"127.0.0.1:{free_port()}"
    opts = ClientOptions(timeout=5, attempts=2, backoff=0.01)
    with ReplicaClient([dead, f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"], reward_pb2_grpc.RewardServiceStub, opts) as c:
        tags = [score(c).results[0].reason for _ in range(6)]
    assert set(tags) == {"a", "b"}
    with ReplicaClient([dead], reward_pb2_grpc.RewardServiceStub, opts) as only_dead:
        with pytest.raises(grpc.RpcError) as info:
            score(only_dead)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    loop.run(a.shutdown())
    loop.run(b.shutdown())


def test_deadline_is_enforced_and_not_retried(loop):
    server = start_server(loop)
    with ReplicaClient(f"127.0.0.1:{server.port}", reward_pb2_grpc.RewardServiceStub, ClientOptions(attempts=3)) as c:
        start = time.monotonic()
        with pytest.raises(grpc.RpcError) as info:
            score(c, "sleep:2", timeout=0.3)
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert time.monotonic() - start < 1.5
    loop.run(server.shutdown())


def test_graceful_shutdown_lets_in_flight_calls_finish(loop):
    server = start_server(loop, grace_seconds=5)
    stub = reward_pb2_grpc.RewardServiceStub(grpc.insecure_channel(f"127.0.0.1:{server.port}"))
    call = stub.Score.future(reward_pb2.ScoreRequest(items=[reward_pb2.ScoreItem(response="sleep:0.5")]), timeout=10)
    time.sleep(0.2)
    loop.run(server.shutdown())
    assert call.result().results[0].reward == 1.0


@pytest.mark.parametrize("text", ["", " , ", "localhost", "host:port"])
def test_bad_addresses_are_refused_clearly(text):
    with pytest.raises(ValueError, match="address"):
        parse_addresses(text)


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
def test_the_bearer_scheme_is_case_insensitive_like_the_apis(loop, scheme):
    server = start_server(loop, auth_token="s3cret")
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    stub = reward_pb2_grpc.RewardServiceStub(channel)
    req = reward_pb2.ScoreRequest(items=[reward_pb2.ScoreItem(task_json="{}", response="ok")])
    assert stub.Score(req, timeout=5, metadata=(("authorization", f"{scheme} s3cret"),)).results[0].reward == 1.0
    with pytest.raises(grpc.RpcError) as err:
        stub.Score(req, timeout=5, metadata=(("authorization", f"{scheme} s3cre"),))
    assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED
    channel.close()


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.7"])
def test_a_service_refuses_to_listen_beyond_loopback_without_a_token(loop, host):
    from services.common.errors import FailedPrecondition

    with pytest.raises(FailedPrecondition, match="CASCADE_SERVER_AUTH_TOKEN is required .*CASCADE_SERVER_HOST="):
        start_server(loop, host=host)


def test_one_replica_that_fails_says_it_retries_not_that_it_tries_the_next(caplog):
    dead = f"127.0.0.1:{free_port()}"
    opts = ClientOptions(timeout=2, attempts=2, backoff=0.01)
    with ReplicaClient(dead, reward_pb2_grpc.RewardServiceStub, opts) as client, \
            caplog.at_level("WARNING", logger="services.common.grpc_client"):
        with pytest.raises(grpc.RpcError):
            score(client)
    lines = [r.getMessage() for r in caplog.records]
    assert not any("next replica" in line for line in lines), lines
    assert len(lines) == 1 and lines[0].startswith(f"Score on {dead} failed (UNAVAILABLE); retrying in ")
    assert lines[0].endswith("(round 2 of 2)")


def test_several_replicas_say_which_one_failed_and_that_the_next_is_tried(caplog):
    dead = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    opts = ClientOptions(timeout=2, attempts=1, backoff=0.01)
    with ReplicaClient(dead, reward_pb2_grpc.RewardServiceStub, opts) as client, \
            caplog.at_level("WARNING", logger="services.common.grpc_client"):
        with pytest.raises(grpc.RpcError):
            score(client)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "failed (UNAVAILABLE); trying the next replica" in lines[0]
