"""Weights over the network, across hosts: a policy host fetches a version the trainer host published,
with no shared folder; a cable cut halfway through the fetch resumes from the last written byte and
the copy's checksum equals the published one; a second fetch of the same version comes from the cache.

The trainer is the real service (`python -m services.trainer`) bound to its host's address with a
bearer token (it refuses to listen beyond loopback without one); the fetch runs on the other host
(tests/hosts/fetch_probe.py). The trainer's cable is capped at 24 Mbit/s (tc tbf) so a 10 MB version
takes seconds and the cut lands mid-stream.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from pathlib import Path

import pytest

from tests.hosts import netns

pytestmark = [pytest.mark.hosts, pytest.mark.integration]
ROOT = Path(__file__).resolve().parents[2]
PORT = 50054


@pytest.fixture(scope="module")
def hosts(can_make_hosts, tiny_model_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("weights-net")
    net = netns.Network("cxh1", subnet=78)
    try:
        trainer, policy = net.add_host("trainer"), net.add_host("policy")
        token = secrets.token_hex(16)
        env = {"PYTHONPATH": str(ROOT), "CASCADE_LOG_FORMAT": "text", "CASCADE_TRAINER_MODEL": str(tiny_model_dir),
               "CASCADE_TRAINER_STORE": str(tmp / "store"), "CASCADE_TRAINER_HOST": trainer.address,
               "CASCADE_TRAINER_PORT": str(PORT), "CASCADE_TRAINER_AUTH_TOKEN": token, "OMP_NUM_THREADS": "1"}
        proc = trainer.popen([sys.executable, "-m", "services.trainer"], env=env, log=tmp / "trainer.log", cwd=ROOT)
        netns.wait_port(trainer, PORT, timeout=180, proc=proc)
        yield net, trainer, policy, token, tmp
    finally:
        net.close()


def probe(policy: netns.Host, trainer: netns.Host, token: str, cache: Path, *args: str) -> dict:
    argv = [sys.executable, "-m", "tests.hosts.fetch_probe", f"{trainer.address}:{PORT}", token, str(cache), *args]
    done = policy.run(argv, timeout=240, env={"PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_fetch_cut_halfway_resumes_from_what_it_kept_and_verifies_the_checksum(hosts):
    net, trainer, policy, token, tmp = hosts
    cache = tmp / "policy-cache"
    net.limit(trainer, mbit=24)
    argv = [sys.executable, "-m", "tests.hosts.fetch_probe", f"{trainer.address}:{PORT}", token, str(cache),
            "--publish", "--timeout", "8"]
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
    net.unshape(trainer)
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

    again = probe(policy, trainer, token, cache, "--version", "1")
    assert again["cached"] and again["bytes"] == 0 and again["sha256"] == out["sha256"]


def test_the_trainer_refuses_a_fetch_without_its_token(hosts):
    _net, trainer, policy, _token, tmp = hosts
    code = ("import grpc,sys\nfrom services.common.pb import trainer_pb2, trainer_pb2_grpc\n"
            f"ch=grpc.insecure_channel('{trainer.address}:{PORT}')\n"
            "try:\n next(iter(trainer_pb2_grpc.TrainerServiceStub(ch).StreamWeights("
            "trainer_pb2.StreamWeightsRequest(version=1), timeout=20)))\nexcept grpc.RpcError as e: print(e.code().name)")
    done = policy.run([sys.executable, "-c", code], timeout=60, env={"PYTHONPATH": str(ROOT)})
    assert done.stdout.strip() == "UNAUTHENTICATED", done.stderr[-2000:]
    assert os.path.exists(tmp / "trainer.log")
