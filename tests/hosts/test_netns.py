"""The multi-host harness itself: hosts reach each other at their own addresses, a cut host is
unreachable until restored, a relay and nftables give latency and loss (the kernel has no netem),
and nothing is left behind."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.hosts import netns

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.hosts

ECHO = ("import socket,sys\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
        "s.bind((sys.argv[1],int(sys.argv[2])));s.listen()\n"
        "while True:\n c,_=s.accept();c.sendall(c.recv(64));c.close()")


def round_trip(frm: netns.Host, to: netns.Host, port: int, timeout: float = 3.0) -> float | None:
    """Seconds for a TCP echo from `frm` to `to`:port, or None when it does not get through."""
    code = (f"import socket,sys,time\nt=time.monotonic()\ntry:\n c=socket.create_connection(({to.address!r},{port}),"
            f"timeout={timeout});c.sendall(b'ping');assert c.recv(64)==b'ping';print(time.monotonic()-t)\n"
            "except OSError: sys.exit(1)")
    done = frm.run([sys.executable, "-c", code], timeout=timeout + 10)
    return float(done.stdout) if done.returncode == 0 else None


def test_hosts_talk_at_their_own_addresses_and_a_cut_host_is_unreachable_until_restored(network):
    a, b = network.add_host("a"), network.add_host("b")
    assert a.address != b.address and not a.address.startswith("127.")
    server = b.popen([sys.executable, "-c", ECHO, b.address, "7000"])
    netns.wait_port(b, 7000, timeout=20, proc=server)
    assert round_trip(a, b, 7000) is not None
    assert round_trip(a, a, 7000) is None, "the port is b's, not a's"

    network.cut(b)
    assert round_trip(a, b, 7000, timeout=1.0) is None
    network.restore(b)
    deadline = time.monotonic() + 10
    while round_trip(a, b, 7000) is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert round_trip(a, b, 7000) is not None, "a restored host is reachable again"


def test_a_relay_delays_a_link_and_nftables_drops_its_packets_where_netem_is_missing(network, tmp_path):
    """What stands in for netem (tests/hosts/relay.py for latency, Network.lose for loss): a round
    trip through the relay takes 2 x the delay more once the control file says so, and with 10 %
    loss the echo still gets through (TCP retransmits) while the kernel counts the drops."""
    a, b = network.add_host("a"), network.add_host("b")
    server = b.popen([sys.executable, "-c", ECHO, "127.0.0.1", "7002"])
    control = tmp_path / "delay-ms"
    relay = b.popen([sys.executable, "-m", "tests.hosts.relay", f"{b.address}:7003", "127.0.0.1:7002", str(control)],
                    cwd=ROOT)
    netns.wait_port(b, 7003, timeout=20, proc=relay)
    fast = round_trip(a, b, 7003)
    control.write_text("150")
    slow = round_trip(a, b, 7003)
    control.write_text("0")
    assert fast is not None and slow is not None and slow - fast > 0.25, f"{fast} s, then {slow} s with 150 ms"
    assert server.poll() is None

    network.lose(b, 10)  # each way: a round trip's SYN, data and FIN all get through in the end
    trips = [round_trip(a, b, 7003, timeout=20.0) for _ in range(12)]
    dropped = network.dropped(b)
    network.lose(b, 0)
    assert all(t is not None for t in trips), f"retransmissions carry every echo: {trips}"
    assert dropped > 0, "the kernel dropped packets on b's cable"
    assert network.dropped(b) == 0, "lose(b, 0) lifts the rules"


def test_close_leaves_no_namespace_or_process_and_stale_ones_are_cleaned(can_make_hosts):
    net = netns.Network("cxh9", subnet=79)
    host = net.add_host("x")
    proc = host.popen([sys.executable, "-c", "import time; time.sleep(600)"])
    net.close()
    assert proc.poll() is not None
    assert not [ns for ns in netns.namespaces() if ns.startswith("cxh9-")]
    netns._run(netns.IP, "netns", "add", "cxh9-left")  # what a crashed run leaves
    assert netns.cleanup_stale("cxh9") == ["cxh9-left"] and "cxh9-left" not in netns.namespaces()
