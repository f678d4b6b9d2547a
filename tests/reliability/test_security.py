"""Security: loopback by default, TLS / mutual TLS plus a shared token on gRPC, the API token.

A real GrpcServer (the teacher servicer over an empty core, so nothing heavy loads) runs
in-process on port 0 with a throwaway CA; calls go through ReplicaClient, the client every
service link uses. A call without the token, with a wrong token, in plaintext, without a client
certificate, or with a certificate from another CA is refused. The control API refuses requests
without its token, and schemathesis drives its OpenAPI schema: no input makes it answer 5xx.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
from pathlib import Path

import grpc
import psutil
import pytest
from prometheus_client import REGISTRY

from services.common.grpc_client import ClientOptions, ReplicaClient
from services.common.grpc_server import GrpcServer
from services.common.handshakes import handshake_counter
from services.common.pb import teacher_pb2, teacher_pb2_grpc
from services.common.settings import ServerSettings
from services.teacher.config import TeacherConfig
from services.teacher.core import TeacherCore
from services.teacher.server import TeacherServicer
from tests.reliability.certs import make_pki

TOKEN = "s3cret-token"
LIST = teacher_pb2.ListTeachersRequest()


class Served:
    """A GrpcServer running on its own event loop in a thread."""

    def __init__(self, settings: ServerSettings):
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.settings = settings
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(30), "server did not start"

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = GrpcServer("teacher", self.settings)
        self.server.add(teacher_pb2_grpc.add_TeacherServiceServicer_to_server,
                        TeacherServicer(TeacherCore(TeacherConfig())), "cascade.v1.TeacherService")
        self.port = self.loop.run_until_complete(self.server.start())
        self.loop.run_until_complete(self.server.set_serving(True))
        self.ready.set()
        self.loop.run_until_complete(self.server.wait())

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.server.request_stop)
        self.thread.join(15)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def call(port: int, host: str = "localhost", **options) -> grpc.StatusCode:
    opts = ClientOptions(timeout=5, attempts=1, **options)
    try:
        with ReplicaClient(f"{host}:{port}", teacher_pb2_grpc.TeacherServiceStub, opts) as client:
            client.call("ListTeachers", LIST)
    except grpc.RpcError as err:
        return err.code()
    return grpc.StatusCode.OK


def test_services_bind_to_loopback_by_default():
    assert ServerSettings().host == "127.0.0.1"
    served = Served(ServerSettings())
    try:
        mine = [c.laddr for c in psutil.Process().net_connections("tcp")
                if c.status == psutil.CONN_LISTEN and c.laddr.port == served.port]
        assert mine and all(_loopback(a.ip) for a in mine), mine
        assert call(served.port, host="127.0.0.1") == grpc.StatusCode.OK
        for ip in _external_ips():  # the machine's other addresses do not reach it
            with pytest.raises(OSError):
                socket.create_connection((ip, served.port), timeout=2).close()
    finally:
        served.stop()


def _loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback


def _external_ips() -> list[str]:
    return [a.address for addrs in psutil.net_if_addrs().values() for a in addrs
            if a.family == socket.AF_INET and not ipaddress.ip_address(a.address).is_loopback]


def test_the_token_is_required_when_set():
    served = Served(ServerSettings(auth_token=TOKEN))
    try:
        assert call(served.port, "127.0.0.1") == grpc.StatusCode.UNAUTHENTICATED
        assert call(served.port, "127.0.0.1", token="wrong") == grpc.StatusCode.UNAUTHENTICATED
        assert call(served.port, "127.0.0.1", token=TOKEN) == grpc.StatusCode.OK
    finally:
        served.stop()


def test_tls_with_a_token_refuses_plaintext_and_tokenless_calls(pki):
    served = Served(ServerSettings(auth_token=TOKEN, tls_cert=pki.server_cert, tls_key=pki.server_key))
    try:
        assert call(served.port, tls_ca=pki.ca, token=TOKEN) == grpc.StatusCode.OK
        assert call(served.port, tls_ca=pki.ca) == grpc.StatusCode.UNAUTHENTICATED
        assert call(served.port, token=TOKEN) == grpc.StatusCode.UNAVAILABLE  # plaintext to a TLS port
        assert call(served.port, tls_ca=pki.stranger_cert, token=TOKEN) == grpc.StatusCode.UNAVAILABLE  # untrusted server
    finally:
        served.stop()


def handshakes_and_connections() -> tuple[float, float]:
    handshake_counter("teacher")  # the teacher's counters exist before the first call reads them
    return tuple(REGISTRY.get_sample_value(f"cascade_teacher_{what}_total") for what in ("tls_handshakes", "connections"))


def test_mutual_tls_refuses_a_client_without_a_certificate_or_with_a_strangers(pki):
    served = Served(ServerSettings(auth_token=TOKEN, tls_cert=pki.server_cert, tls_key=pki.server_key,
                                   tls_client_ca=pki.ca))
    try:
        began, connected = handshakes_and_connections()
        ok = dict(tls_ca=pki.ca, token=TOKEN)
        assert call(served.port, **ok, tls_cert=pki.client_cert, tls_key=pki.client_key) == grpc.StatusCode.OK
        assert call(served.port, **ok) == grpc.StatusCode.UNAVAILABLE
        assert call(served.port, **ok, tls_cert=pki.stranger_cert, tls_key=pki.stranger_key) == grpc.StatusCode.UNAVAILABLE
        assert call(served.port, token=TOKEN) == grpc.StatusCode.UNAVAILABLE  # plaintext
        assert call(served.port, tls_ca=pki.ca, tls_cert=pki.client_cert,
                    tls_key=pki.client_key) == grpc.StatusCode.UNAUTHENTICATED  # a certificate is not a token
        # the refused handshakes never reach Python as calls; the metrics count them all the same
        handshakes, connections = (now - before for now, before in zip(handshakes_and_connections(),
                                                                       (began, connected)))
        assert connections == 2, "the two callers whose handshake succeeded"
        assert handshakes - connections >= 3, f"{handshakes} handshakes, {connections} connections"
    finally:
        served.stop()


# ------------------------------------------------------------------------------------- the API
@pytest.fixture(scope="module")
def api(tmp_path_factory):
    from services.api.app import build_app
    from services.api.config import ApiSettings
    from services.api.core import build_core
    from services.orchestrator.config import OrchestratorSettings

    core = build_core(orchestrator=OrchestratorSettings(home=Path(tmp_path_factory.mktemp("api"))))
    yield build_app(ApiSettings(token=TOKEN), core)
    core.ledger.close()


def test_the_api_refuses_requests_without_its_token(api):
    from fastapi.testclient import TestClient

    client = TestClient(api)
    assert client.get("/runs").status_code == 401
    assert client.get("/runs", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert client.get("/runs", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_no_schema_conforming_or_malformed_api_input_gets_a_server_error(api):
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from schemathesis.checks import not_a_server_error

    schema = schemathesis.openapi.from_asgi("/openapi.json", api, headers={"Authorization": f"Bearer {TOKEN}"})
    failures, operations = [], 0
    for result in schema.get_all_operations():
        op = result.ok()
        operations += 1

        @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(case=op.as_strategy())
        def check(case):
            case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"}, checks=[not_a_server_error])

        try:
            check()
        except Exception as exc:  # noqa: BLE001  (collect, so the assertion names every failing operation)
            failures.append(f"{op.method.upper()} {op.path}: {str(exc).strip().splitlines()[0]}")
    assert operations >= 3, "the OpenAPI schema lists almost no operations"
    assert failures == [], failures
