"""Weights over the network vs a local load, at the tiny preset and at ~29M parameters (`small`).

    .venv/bin/python -m bench.weight_fetch [--out bench/results/weight_fetch.md] [--repeats 3]
        [--presets tiny,small]

Starts the real trainer (`python -m services.trainer`, bearer token, loopback), publishes one
version, then times, `repeats` times each: (a) a local load of the published folder (what a
policy or teacher on the trainer's node, or on a shared folder, does); (b) a fetch of the same
version over gRPC into an empty cache (services.common.weightfetch: streamed in 4 MiB chunks,
checksum recomputed) plus the load of the fetched copy; (c) the same with the version already
cached (the checksum file is trusted: no bytes move). Loopback has no network latency or
bandwidth limit, so (b) - (a) is the cost of streaming and verifying, not of a real link.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from services.common.grpc_client import ClientOptions, ReplicaClient
from services.common.modelio import load_causal_lm
from services.common.pb import trainer_pb2, trainer_pb2_grpc
from services.common.supervisor import free_port
from services.common.tinymodel import init_model
from services.common.weightfetch import fetch_version

ROOT = Path(__file__).resolve().parents[1]


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "weight_fetch.md")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--presets", default="tiny,small", help="comma-separated tinymodel presets, one table each")
    args = ap.parse_args()
    lines = ["# Weights over the network vs a local load", ""]
    for preset in args.presets.split(","):
        lines += measure(preset, args.repeats)
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))


def measure(preset: str, repeats: int) -> list[str]:
    """One table: local load, fetch, fetch + load, cached + load of one published version of `preset`."""
    with tempfile.TemporaryDirectory(prefix="wfetch-") as tmp_s:
        tmp = Path(tmp_s)
        model = init_model(tmp / preset, preset=preset, seed=0)
        params = json.loads((model / "cascade_model.json").read_text())["parameters"]
        port, token = free_port(), secrets.token_hex(16)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "CASCADE_TRAINER_MODEL": str(model), "CASCADE_LOG_FORMAT": "text",
               "CASCADE_TRAINER_STORE": str(tmp / "store"), "CASCADE_TRAINER_PORT": str(port),
               "CASCADE_TRAINER_AUTH_TOKEN": token, "OMP_NUM_THREADS": "1"}
        log = (tmp / "trainer.log").open("wb")
        proc = subprocess.Popen([sys.executable, "-m", "services.trainer"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        client = ReplicaClient(f"127.0.0.1:{port}", trainer_pb2_grpc.TrainerServiceStub,
                               ClientOptions(timeout=120, token=token))
        try:
            client.wait_ready(300)
            ref = client.call("PublishWeights", trainer_pb2.PublishWeightsRequest())
            local_dir = tmp / "store" / "weights" / f"v{ref.version}"
            size = sum(p.stat().st_size for p in local_dir.rglob("*") if p.is_file())
            load_causal_lm(local_dir)  # warm the imports and the page cache alike for every case
            local, fetched, fetch_only, cached = [], [], [], []
            for i in range(repeats):
                local.append(timed(lambda: load_causal_lm(local_dir)))
                cache = tmp / f"cache-{i}"
                t = time.perf_counter()
                got = fetch_version(client, ref.version, cache)
                fetch_only.append(time.perf_counter() - t)
                load_causal_lm(got.path)
                fetched.append(time.perf_counter() - t)
                assert got.sha256 == ref.sha256 and not got.cached
                t = time.perf_counter()
                again = fetch_version(client, ref.version, cache)
                load_causal_lm(again.path)
                cached.append(time.perf_counter() - t)
                assert again.cached
                shutil.rmtree(cache)
        finally:
            client.close()
            proc.terminate()
            proc.wait(30)
    med = statistics.median
    return [
        f"## `{preset}` preset ({params / 1e6:.1f} M parameters)",
        "",
        f"`python -m bench.weight_fetch` on {platform.machine()} ({os.cpu_count()} cores, shared), CPU only, "
        f"{repeats} repeats each, median shown. The trainer is the real service on loopback with a "
        f"bearer token; one published version of {size / 1e6:.1f} MB (model.safetensors, config, tokenizer).",
        "",
        "| How the policy / teacher gets version 1 | seconds (median) | all runs |",
        "|---|---:|---|",
        f"| local load of the trainer's folder (same node or shared folder) | {med(local):.3f} | "
        f"{', '.join(f'{x:.3f}' for x in local)} |",
        f"| fetch over gRPC (4 MiB chunks, checksum verified), no load | {med(fetch_only):.3f} | "
        f"{', '.join(f'{x:.3f}' for x in fetch_only)} |",
        f"| fetch over gRPC + load of the copy | {med(fetched):.3f} | {', '.join(f'{x:.3f}' for x in fetched)} |",
        f"| version already cached + load | {med(cached):.3f} | {', '.join(f'{x:.3f}' for x in cached)} |",
        "",
        f"Fetching adds {med(fetched) - med(local):.3f} s to a load ({med(fetched) / med(local):.1f}x); "
        "a cached version costs a local load. Loopback has no bandwidth limit: on a real link add "
        f"size / bandwidth ({size / 1e6:.0f} MB at 1 Gbit/s: {size * 8 / 1e9:.2f} s). A cut mid-fetch is resumed "
        "from the last written byte (tests/hosts/test_weights_over_network.py).",
        "",
    ]


if __name__ == "__main__":
    main()
