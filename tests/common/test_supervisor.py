"""The local process supervisor: readiness, restart after a crash, clean stop of whole groups."""

import os
import signal
import sys
import time

import pytest

from services.common.supervisor import ProcessSpec, Supervisor, free_port

SERVER = "import http.server,sys; http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), http.server.BaseHTTPRequestHandler).serve_forever()"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"


def test_waits_until_ready_restarts_after_a_kill_and_stops_everything(tmp_path):
    port = free_port()
    sup = Supervisor(tmp_path)
    sup.start(ProcessSpec("web", [sys.executable, "-c", SERVER, str(port)], http_port=port))
    first = sup.pid("web")
    sup.kill("web", signal.SIGKILL)
    deadline = time.monotonic() + 20
    while sup.pid("web") == first and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sup.pid("web") != first, "a killed process is restarted"
    sup.wait_ready("web")
    second = sup.pid("web")
    sup.stop(grace=5)
    assert not alive(second)


def test_a_process_that_dies_at_start_is_reported_with_its_output(tmp_path):
    sup = Supervisor(tmp_path)
    spec = ProcessSpec("broken", [sys.executable, "-c", "print('cannot load model'); raise SystemExit(3)"],
                       http_port=free_port(), restart=False, ready_timeout=20)
    with pytest.raises(RuntimeError, match="exited with code 3: cannot load model"):
        sup.start(spec)
    sup.stop(grace=1)


def test_stop_takes_children_that_ignore_sigterm(tmp_path):
    code = ("import os,signal,time,sys\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "pid=os.fork()\n"
            "if pid==0:\n    time.sleep(60)\n"
            "open(sys.argv[1],'w').write(str(pid)); time.sleep(60)\n")
    child_file = tmp_path / "child.pid"
    sup = Supervisor(tmp_path / "logs")
    sup.start(ProcessSpec("stubborn", [sys.executable, "-c", code, str(child_file)], restart=False))
    deadline = time.monotonic() + 10
    while not child_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.1)
    child = int(child_file.read_text())
    parent = sup.pid("stubborn")
    sup.stop(grace=0.5)
    time.sleep(0.2)
    assert not alive(parent) and not alive(child)


def test_start_all_leaves_nothing_running_when_one_process_fails(tmp_path):
    port = free_port()
    sup = Supervisor(tmp_path)
    good = ProcessSpec("web", [sys.executable, "-c", SERVER, str(port)], http_port=port)
    bad = ProcessSpec("broken", [sys.executable, "-c", "import time; time.sleep(0.5); raise SystemExit(2)"],
                      http_port=free_port(), restart=False, ready_timeout=20)
    with pytest.raises(RuntimeError, match="broken exited with code 2"):
        sup.start_all([good, bad])
    time.sleep(0.2)
    assert not alive(sup.pid("web")), "the healthy process was stopped too"


def test_a_restart_is_logged_with_the_service_its_pids_and_how_it_exited(tmp_path, caplog):
    port = free_port()
    sup = Supervisor(tmp_path)
    sup.start(ProcessSpec("web", [sys.executable, "-c", SERVER, str(port)], http_port=port))
    first = sup.pid("web")
    assert sup.pids() == {"web": first}
    with caplog.at_level("WARNING", logger="services.common.supervisor"):
        sup.kill("web", signal.SIGKILL)
        deadline = time.monotonic() + 20
        while sup.pid("web") == first and time.monotonic() < deadline:
            time.sleep(0.1)
    second = sup.pid("web")
    sup.stop(grace=5)
    lines = [r.getMessage() for r in caplog.records]
    assert f"web (pid {first}) exited with signal 9 (SIGKILL); restarted as pid {second} (restart 1 of 5)" in lines


def test_exit_text():
    from services.common.supervisor import exit_text

    assert exit_text(3) == "code 3" and exit_text(-15) == "signal 15 (SIGTERM)"


HEALTH = """
import asyncio, sys
import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

async def main(port, then):
    server = grpc.aio.server()
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    await asyncio.sleep(1.0)  # loading its model
    if then == "exit":
        print("model failed to load", flush=True)
        raise SystemExit(4)
    if then == "serve":
        await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    await asyncio.sleep(60)

asyncio.run(main(int(sys.argv[1]), sys.argv[2]))
"""


def health_server(port: int, then: str, **kw) -> ProcessSpec:
    return ProcessSpec(f"grpc-{then}", [sys.executable, "-c", HEALTH, str(port), then],
                       grpc_address=f"127.0.0.1:{port}", restart=False, **{"ready_timeout": 60, **kw})


def test_a_grpc_service_is_ready_when_its_health_says_serving(tmp_path):
    """Readiness pushed by the server's health Watch: start returns once SERVING is set, not before."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    port = free_port()
    sup = Supervisor(tmp_path)
    try:
        sup.start(health_server(port, "serve"))
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        sup.stop(grace=2)


def test_a_grpc_service_that_exits_while_loading_is_reported_with_its_output(tmp_path):
    sup = Supervisor(tmp_path)
    with pytest.raises(RuntimeError, match="grpc-exit exited with code 4: model failed to load"):
        sup.start(health_server(free_port(), "exit"))
    sup.stop(grace=1)


def test_a_grpc_service_that_never_listens_and_exits_is_reported(tmp_path):
    sup = Supervisor(tmp_path)
    spec = ProcessSpec("mute", [sys.executable, "-c", "import time; time.sleep(1); raise SystemExit(5)"],
                       grpc_address=f"127.0.0.1:{free_port()}", restart=False, ready_timeout=60)
    with pytest.raises(RuntimeError, match="mute exited with code 5"):
        sup.start(spec)
    sup.stop(grace=1)


def test_a_grpc_service_never_serving_times_out(tmp_path):
    sup = Supervisor(tmp_path)
    with pytest.raises(RuntimeError, match="grpc-hang not ready after 3s"):
        sup.start(health_server(free_port(), "hang", ready_timeout=3))
    sup.stop(grace=1)
