"""The container health check against real GrpcServers over loopback (plaintext, token, TLS)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from services.common.grpc_server import GrpcServer
from services.common.healthcheck import main
from services.common.settings import ServerSettings
from services.common.supervisor import free_port


class Served:
    """A GrpcServer with no servicer on its own asyncio loop in a thread."""

    def __init__(self, **settings):
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

        async def build() -> GrpcServer:  # grpc.aio servers belong to the loop they are made on
            return GrpcServer("hc", ServerSettings(port=0, **settings))

        self.server = self.run(build())
        self.port = self.run(self.server.start())
        self.address = f"127.0.0.1:{self.port}"

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def close(self):
        self.run(self.server.server.stop(0))
        self.loop.call_soon_threadsafe(self.loop.stop)


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A key and self-signed certificate for the name `teacher-node`, made by openssl."""
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", str(key),
                    "-out", str(cert), "-subj", "/CN=teacher-node", "-addext", "subjectAltName=DNS:teacher-node"],
                   check=True, capture_output=True)
    return key, cert


@pytest.fixture
def served():
    started: list[Served] = []

    def make(**settings) -> Served:
        started.append(Served(**settings))
        return started[-1]

    yield make
    for s in started:
        s.close()


def test_exit_code_follows_the_serving_status(served, capsys):
    s = served(auth_token="secret")  # health needs no token, like the container check
    assert main([s.address]) == 1
    assert "NOT_SERVING" in capsys.readouterr().out
    s.run(s.server.set_serving(True))
    assert main([s.address]) == 0
    assert capsys.readouterr().out.strip() == f"{s.address}: SERVING"


def test_an_unreachable_address_fails_with_one_line(capsys):
    assert main([f"127.0.0.1:{free_port()}", "--timeout", "0.5"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("healthcheck: 127.0.0.1:") and "UNAVAILABLE" in err and "\n" not in err


def test_bad_timeout_is_refused(capsys):
    assert main(["127.0.0.1:1", "--timeout", "0"]) == 1
    assert "--timeout" in capsys.readouterr().err


def test_tls_check_with_the_ca_and_server_name(served, tmp_path: Path):
    key, cert = self_signed(tmp_path)
    s = served(tls_cert=cert, tls_key=key)
    s.run(s.server.set_serving(True))
    assert main([s.address, "--tls-ca", str(cert), "--server-name", "teacher-node"]) == 0
    assert main([s.address, "--timeout", "1"]) == 1, "plaintext against a TLS port must fail"


def test_mutual_tls_needs_the_client_certificate(served, tmp_path: Path):
    key, cert = self_signed(tmp_path)  # its own CA, server and client certificate
    s = served(tls_cert=cert, tls_key=key, tls_client_ca=cert)
    s.run(s.server.set_serving(True))
    tls = [s.address, "--tls-ca", str(cert), "--server-name", "teacher-node", "--timeout", "2"]
    assert main(tls) == 1, "no client certificate: the handshake must be refused"
    assert main([*tls, "--tls-cert", str(cert), "--tls-key", str(key)]) == 0
    assert main([*tls, "--tls-cert", str(cert)]) == 1


def test_runs_as_a_module(served):
    s = served()
    s.run(s.server.set_serving(True))
    proc = subprocess.run([sys.executable, "-m", "services.common.healthcheck", s.address],
                          check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("SERVING")
