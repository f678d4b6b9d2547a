"""Weights over the network and who may talk, across hosts: a policy host fetches a version the trainer
host published, with no shared folder; a cable cut halfway through the fetch resumes from the last
written byte and the copy's checksum equals the published one; a second fetch of the same version
comes from the cache. A client without the token, with a wrong one, without TLS or with a certificate
from another CA is refused, with the status code named, and the token and handshake refusals are counted in the
trainer's metrics.

The trainer is the real service (`python -m services.trainer`) bound to its host's address with
mutual TLS (a throwaway CA made here) and a bearer token (it refuses to listen beyond loopback
without one); the clients run on the other host (tests/hosts/fetch_probe.py, talk_probe.py). The trainer's cable is capped at 24 Mbit/s (tc tbf) so a 10 MB version
takes seconds and the cut lands mid-stream.
"""

from __future__ import annotations

import json
import secrets
import sys
import time
from pathlib import Path

import pytest

from tests.hosts import netns
from tests.reliability.certs import make_pki

pytestmark = [pytest.mark.hosts, pytest.mark.integration]
ROOT = Path(__file__).resolve().parents[2]
PORT = 50054
METRICS = 9100


@pytest.fixture(scope="module")
def hosts(can_make_hosts, tiny_model_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("weights-net")
    net = netns.Network("cxh1", subnet=78)
    try:
        trainer, policy = net.add_host("trainer"), net.add_host("policy")
        token = secrets.token_hex(16)
        pki = make_pki(tmp / "pki", server_san=f"IP:{trainer.address}")
        env = {"CASCADE_TRAINER_TLS_CERT": str(pki.server_cert), "CASCADE_TRAINER_TLS_KEY": str(pki.server_key),
               "CASCADE_TRAINER_TLS_CLIENT_CA": str(pki.ca), "CASCADE_TRAINER_METRICS_PORT": str(METRICS),"PYTHONPATH": str(ROOT), "CASCADE_LOG_FORMAT": "text", "CASCADE_TRAINER_MODEL": str(tiny_model_dir),
               "CASCADE_TRAINER_STORE": str(tmp / "store"), "CASCADE_TRAINER_HOST": trainer.address,
               "CASCADE_TRAINER_PORT": str(PORT), "CASCADE_TRAINER_AUTH_TOKEN": token, "OMP_NUM_THREADS": "1",
               "GLOO_SOCKET_IFNAME": "lo"}  # the trainer's one-rank process group stays on the host's loopback
        proc = trainer.popen([sys.executable, "-m", "services.trainer"], env=env, log=tmp / "trainer.log", cwd=ROOT)
        netns.wait_port(trainer, PORT, timeout=180, proc=proc)
        yield net, trainer, policy, token, tmp, pki
    finally:
        net.close()


def tls_args(pki) -> list[str]:
    return ["--tls-ca", str(pki.ca), "--tls-cert", str(pki.client_cert), "--tls-key", str(pki.client_key)]


def probe(policy: netns.Host, trainer: netns.Host, token: str, cache: Path, pki, *args: str) -> dict:
    argv = [sys.executable, "-m", "tests.hosts.fetch_probe", f"{trainer.address}:{PORT}", token, str(cache),
            *tls_args(pki), *args]
    done = policy.run(argv, timeout=240, env={"PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_fetch_cut_halfway_resumes_from_what_it_kept_and_verifies_the_checksum(hosts):
    net, trainer, policy, token, tmp, pki = hosts
    cache = tmp / "policy-cache"
    net.limit(trainer, mbit=24)
    argv = [sys.executable, "-m", "tests.hosts.fetch_probe", f"{trainer.address}:{PORT}", token, str(cache),
            "--publish", "--timeout", "8", *tls_args(pki)]
    out_file = tmp / "probe.out"
    proc = policy.popen(argv, env={"PYTHONPATH": str(ROOT)}, log=out_file, cwd=ROOT)
    progress = cache / ".v1.partial.progress.json"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:  # cut once a third of the weights file has arrived
        state = json.loads(progress.read_text()) if progress.exists() else {}
        if state.get("path") == "model.safetensors" and state["offset"] > 3_000_000:
            break
        assert proc.poll() is None, out_file.read_text()[-3000:]
        time.sleep(0.05)
    else:
        pytest.fail("the fetch never got a third of the way")
    net.cut(trainer)
    cut_at = json.loads(progress.read_text())
    time.sleep(10.0)  # longer than the stream's 8 s deadline: TCP alone cannot ride it out
    net.restore(trainer)
    proc.wait(120)
    net.unlimit(trainer)
    lines = out_file.read_text().strip().splitlines()
    assert proc.returncode == 0, "\n".join(lines[-30:])
    out = json.loads(lines[-1])
    size = (Path(out["path"]) / "model.safetensors").stat().st_size
    print(f"\ncut at {cut_at}; resumed {out['resumes']}x; {out['bytes']} bytes received for a "
          f"{size}-byte weights file; fetch {out['fetch_s']:.1f} s")
    assert out["resumes"] >= 1 and out["sha256"] == out["published_sha256"]
    assert out["bytes"] < size * 1.3, "resumed from the last written byte, not from the start"
    assert not (cache / ".v1.partial").exists() and (cache / "v1" / ".sha256").read_text() == out["sha256"]
    assert "resuming from there" in "\n".join(lines)

    again = probe(policy, trainer, token, cache, pki, "--version", "1")
    assert again["cached"] and again["bytes"] == 0 and again["sha256"] == out["sha256"]


def test_who_may_talk_across_hosts_and_the_refusals_are_counted(hosts):
    _net, trainer, policy, token, _tmp, pki = hosts
    argv = [sys.executable, "-m", "tests.hosts.talk_probe", f"{trainer.address}:{PORT}", token, str(pki.ca.parent)]
    done = policy.run(argv, timeout=180, env={"PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    codes = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"\n{codes}")
    assert codes == {"right client": "OK", "no token": "UNAUTHENTICATED", "wrong token": "UNAUTHENTICATED",
                     "no TLS": "UNAVAILABLE", "other-CA certificate": "UNAVAILABLE",
                     "no client certificate": "UNAVAILABLE"}
    code = (f"import urllib.request;print(urllib.request.urlopen('http://{trainer.address}:{METRICS}/metrics',"
            "timeout=10).read().decode())")
    metrics = policy.run([sys.executable, "-c", code], timeout=60).stdout
    refused = [line for line in metrics.splitlines()
               if line.startswith("cascade_trainer_rpc_errors_total{") and 'code="UNAUTHENTICATED"' in line
               and 'method="GetState"' in line]
    assert refused and float(refused[0].rsplit(" ", 1)[1]) >= 2, metrics[-2000:]
    # the three refused handshakes never became calls; the trainer counts them all the same
    sample = {line.split(" ")[0]: float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
              if line.startswith(("cascade_trainer_tls_handshakes_total", "cascade_trainer_connections_total"))}
    began, connected = sample["cascade_trainer_tls_handshakes_total"], sample["cascade_trainer_connections_total"]
    assert began - connected >= 3, f"{began} handshakes, {connected} connections"
