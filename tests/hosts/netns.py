"""Several hosts on one machine: Linux network namespaces joined by veth links to one bridge.

`Network("cxh1")` makes a switch namespace holding a bridge; `net.add_host("trainer")` makes a
namespace with its own loopback and one interface `eth0` at its own address (10.77.<n>.0/24),
cabled to the bridge through a veth pair whose switch end is `<prefix>-<i>`. Traffic can only flow
between the namespaces made here: none of them has a route or a link to the machine's own network.

    with Network("cxh1") as net:
        a, b = net.add_host("a"), net.add_host("b")
        proc = b.popen([python, "-m", "services.teacher"], env={...})   # runs inside b
        b.popen(argv, hide=[store])   # and cannot see `store`: an empty tmpfs over it, in its own mount namespace
        net.cut(b)      # b's cable unplugged (link down at the switch): a's packets to b go nowhere
        net.restore(b)
        net.limit(b, mbit=24)                    # tc tbf: a slow link (kernels without netem have it)
        net.unlimit(b)
        net.lose(b, 5)                           # nftables: 5 % of b's packets dropped each way

`close()` kills every process left in the namespaces (ours: they were started here), deletes them,
and is idempotent; `cleanup_stale(prefix)` deletes namespaces a crashed earlier run left behind.
Needs root and `ip` (iproute2); `unavailable()` says why not, for a skip.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

IP = shutil.which("ip") or "/usr/sbin/ip"
TC = shutil.which("tc") or "/usr/sbin/tc"
NFT = shutil.which("nft") or "/usr/sbin/nft"


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done


def namespaces() -> list[str]:
    out = _run(IP, "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def unavailable() -> str | None:
    """Why this machine cannot make hosts (not root, no iproute2, namespaces refused), else None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if not Path(IP).exists():
        return "needs iproute2's `ip`"
    if not Path(NFT).exists():
        return "needs nftables' `nft` (packet loss on a host's cable)"
    probe = f"cxprobe{os.getpid()}"
    done = _run(IP, "netns", "add", probe, check=False)
    if done.returncode != 0:
        return f"ip netns add refused: {done.stderr.strip()}"
    _run(IP, "netns", "del", probe, check=False)
    return None


def _pids(ns: str) -> list[int]:
    out = _run(IP, "netns", "pids", ns, check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def _kill_namespace(ns: str) -> None:
    """SIGKILL what runs in `ns` (processes this harness started there), then delete it."""
    for _ in range(20):
        pids = _pids(ns)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    _run(IP, "netns", "del", ns, check=False)


def cleanup_stale(prefix: str) -> list[str]:
    """Delete every namespace named `<prefix>-*` (left by an earlier run that could not clean up)."""
    stale = [ns for ns in namespaces() if ns.startswith(prefix + "-")]
    for ns in stale:
        _kill_namespace(ns)
    return stale


@dataclass
class Host:
    name: str
    ns: str
    address: str
    cable: str
    """The switch end of this host's veth pair (what `cut` takes down)."""
    procs: list[subprocess.Popen] = field(default_factory=list)

    def argv(self, argv: list[str]) -> list[str]:
        return [IP, "netns", "exec", self.ns, *argv]

    def popen(self, argv: list[str], env: dict[str, str] | None = None, log: Path | None = None,
              cwd: Path | str | None = None, hide: list[Path] | None = None) -> subprocess.Popen:
        """Start `argv` inside this host (its own process group; output to `log`, else discarded). Each
        folder in `hide` is covered, for this process only, by an empty tmpfs (`ip netns exec` gives the
        process its own mount namespace, a slave of the machine's): it sees none of the files there."""
        if hide:
            for folder in hide:
                Path(folder).mkdir(parents=True, exist_ok=True)
            mounts = " && ".join(f"mount -t tmpfs -o size=1m,mode=0755 cxhidden {shlex.quote(str(f))}" for f in hide)
            argv = ["sh", "-c", f'{mounts} && exec "$@"', "sh", *argv]
        out = log.open("ab") if log else subprocess.DEVNULL
        try:
            proc = subprocess.Popen(self.argv(argv), env={**os.environ, **(env or {})}, cwd=cwd, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            if log:
                out.close()
        self.procs.append(proc)
        return proc

    def run(self, argv: list[str], timeout: float = 60, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(argv), capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **(env or {})})

    def can_reach(self, address: str, port: int, timeout: float = 1.0) -> bool:
        """Whether a TCP connection from this host to address:port opens."""
        code = (f"import socket,sys\ntry:\n socket.create_connection(({address!r},{port}),timeout={timeout}).close()\n"
                "except OSError: sys.exit(1)")
        return self.run(["python3", "-c", code], timeout=timeout + 10).returncode == 0


class Network:
    """A switch namespace with a bridge, and hosts cabled to it (see the module docstring)."""

    def __init__(self, prefix: str, subnet: int = 77):
        if len(prefix) > 9:
            raise ValueError(f"prefix {prefix!r}: at most 9 characters (interface names are 15)")
        self.prefix = prefix
        self.subnet = f"10.{subnet}.0"
        self.switch = f"{prefix}-sw"
        self.hosts: dict[str, Host] = {}
        cleanup_stale(prefix)
        _run(IP, "netns", "add", self.switch)
        self._sw("ip", "link", "add", "br0", "type", "bridge")
        self._sw("ip", "link", "set", "br0", "up")

    def _sw(self, *argv: str) -> subprocess.CompletedProcess:
        return _run(IP, "netns", "exec", self.switch, *argv)

    def add_host(self, name: str) -> Host:
        """A new host `<prefix>-<name>` at the next address, cabled to the switch and up."""
        i = len(self.hosts) + 2
        ns, cable = f"{self.prefix}-{name}", f"{self.prefix}-{i}"
        address = f"{self.subnet}.{i}"
        _run(IP, "netns", "add", ns)
        _run(IP, "link", "add", cable, "netns", self.switch, "type", "veth", "peer", "name", "eth0", "netns", ns)
        self._sw("ip", "link", "set", cable, "master", "br0", "up")
        for argv in (["ip", "link", "set", "lo", "up"], ["ip", "addr", "add", f"{address}/24", "dev", "eth0"],
                     ["ip", "link", "set", "eth0", "up"]):
            _run(IP, "netns", "exec", ns, *argv)
        host = Host(name, ns, address, cable)
        self.hosts[name] = host
        return host

    def cut(self, host: Host) -> None:
        """Unplug the host's cable: nothing reaches it or leaves it until `restore`."""
        self._sw("ip", "link", "set", host.cable, "down")

    def restore(self, host: Host) -> None:
        self._sw("ip", "link", "set", host.cable, "up")
        _run(IP, "netns", "exec", host.ns, "ip", "link", "set", "eth0", "up")

    def limit(self, host: Host, mbit: float) -> None:
        """Cap the host's cable at `mbit` in both directions (tc tbf, which kernels without netem have)."""
        spec = ["tbf", "rate", f"{mbit}mbit", "burst", "32kbit", "latency", "400ms"]
        self._sw(TC, "qdisc", "replace", "dev", host.cable, "root", *spec)
        _run(IP, "netns", "exec", host.ns, TC, "qdisc", "replace", "dev", "eth0", "root", *spec)

    def unlimit(self, host: Host) -> None:
        _run(IP, "netns", "exec", self.switch, TC, "qdisc", "del", "dev", host.cable, "root", check=False)
        _run(IP, "netns", "exec", host.ns, TC, "qdisc", "del", "dev", "eth0", "root", check=False)

    def lose(self, host: Host, loss_pct: float) -> None:
        """Drop `loss_pct` % of the packets on the host's cable, each way, at random (nftables in the
        host: a kernel without netem has it). TCP retransmits what is lost, as on a lossy link;
        latency comes from a relay in front of the service (tests/hosts/relay.py). `loss_pct` 0 lifts it."""
        self.unlose(host)
        if loss_pct <= 0:
            return
        per_mille = round(loss_pct * 10)
        rules = (f"table inet cxloss {{\n"
                 f" chain in {{ type filter hook input priority 0; policy accept; "
                 f"iifname \"eth0\" numgen random mod 1000 < {per_mille} counter drop; }}\n"
                 f" chain out {{ type filter hook output priority 0; policy accept; "
                 f"oifname \"eth0\" numgen random mod 1000 < {per_mille} counter drop; }}\n}}\n")
        done = subprocess.run(host.argv([NFT, "-f", "-"]), input=rules, capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise RuntimeError(f"nft on {host.name}: {done.stderr.strip() or done.returncode}")

    def unlose(self, host: Host) -> None:
        _run(*host.argv([NFT, "delete", "table", "inet", "cxloss"]), check=False)

    def losing(self, host: Host) -> bool:
        """Whether `host` has loss rules in place."""
        return _run(*host.argv([NFT, "list", "table", "inet", "cxloss"]), check=False).returncode == 0

    def dropped(self, host: Host) -> int:
        """Packets the loss rules of `host` dropped so far (both ways)."""
        out = _run(*host.argv([NFT, "list", "table", "inet", "cxloss"]), check=False).stdout
        return sum(int(n) for n in re.findall(r"counter packets (\d+)", out))

    def close(self) -> None:
        """Stop every process of every host, delete the hosts and the switch (idempotent)."""
        for host in self.hosts.values():
            for proc in host.procs:
                if proc.poll() is None:
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
            _kill_namespace(host.ns)
            for proc in host.procs:
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
        self.hosts.clear()
        _kill_namespace(self.switch)

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def wait_port(host: Host, port: int, timeout: float = 60.0, proc: subprocess.Popen | None = None) -> None:
    """Block until host:port accepts TCP from inside `host` (or `proc` exits: RuntimeError)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process on {host.name} exited with {proc.returncode} before {port} opened")
        if host.can_reach(host.address, port, timeout=0.5):
            return
        time.sleep(0.2)
    raise TimeoutError(f"{host.name}:{port} not open after {timeout:.0f}s")


def free_port_in(host: Host) -> int:
    """A TCP port free on `host` a moment ago."""
    code = "import socket;s=socket.socket();s.bind(('%s',0));print(s.getsockname()[1])" % host.address
    return int(host.run(["python3", "-c", code]).stdout.strip())


__all__ = ["Host", "Network", "cleanup_stale", "free_port_in", "namespaces", "unavailable",
           "wait_port"]
