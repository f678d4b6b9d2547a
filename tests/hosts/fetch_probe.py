"""Run inside a host (tests/hosts): publish a version on a trainer across the network, fetch it into a
local cache with services.common.weightfetch, load it, and print one JSON line with what happened.

    python -m tests.hosts.fetch_probe ADDRESS TOKEN CACHE [--publish] [--version N] [--chunk-bytes B]
        [--tls-ca CA --tls-cert CERT --tls-key KEY]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from services.common.grpc_client import ClientOptions, ReplicaClient
from services.common.pb import trainer_pb2, trainer_pb2_grpc
from services.common.weightfetch import fetch_version


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("address")
    ap.add_argument("token")
    ap.add_argument("cache", type=Path)
    ap.add_argument("--publish", action="store_true")
    ap.add_argument("--version", type=int, default=0)
    ap.add_argument("--chunk-bytes", type=int, default=256 * 1024)
    ap.add_argument("--timeout", type=float, default=8.0)
    ap.add_argument("--load", action="store_true", help="also load the fetched folder (and time it)")
    ap.add_argument("--tls-ca", type=Path)
    ap.add_argument("--tls-cert", type=Path)
    ap.add_argument("--tls-key", type=Path)
    args = ap.parse_args()
    client = ReplicaClient(args.address, trainer_pb2_grpc.TrainerServiceStub,
                           ClientOptions(timeout=60, attempts=3, token=args.token, tls_ca=args.tls_ca,
                                         tls_cert=args.tls_cert, tls_key=args.tls_key))
    client.wait_ready(120)
    out: dict = {}
    version = args.version
    if args.publish:
        ref = client.call("PublishWeights", trainer_pb2.PublishWeightsRequest())
        version, out["published_sha256"] = ref.version, ref.sha256
    got = fetch_version(client, version, args.cache, chunk_bytes=args.chunk_bytes, timeout=args.timeout)
    out |= {"version": got.version, "sha256": got.sha256, "cached": got.cached, "bytes": got.bytes_received,
            "resumes": got.resumes, "fetch_s": got.seconds, "path": str(got.path)}
    if args.load:
        from services.common.modelio import load_causal_lm

        t = time.perf_counter()
        load_causal_lm(got.path)
        out["load_s"] = time.perf_counter() - t
    print(json.dumps(out), flush=True)
    client.close()


if __name__ == "__main__":
    main()
