"""Run inside a host: call a trainer across the network the ways a stranger might, print one JSON line
{case: status code name}. Cases: the right client (mutual TLS + token), no token, a wrong token, no TLS
(plaintext to the TLS port), a client certificate from another CA, no client certificate.

    python -m tests.hosts.talk_probe ADDRESS TOKEN PKI_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import grpc

from services.common.grpc_client import ClientOptions, ReplicaClient
from services.common.pb import trainer_pb2, trainer_pb2_grpc


def code(address: str, **opts) -> str:
    client = ReplicaClient(address, trainer_pb2_grpc.TrainerServiceStub, ClientOptions(timeout=10, attempts=1, **opts))
    try:
        client.call("GetState", trainer_pb2.GetStateRequest())
        return "OK"
    except grpc.RpcError as err:
        return err.code().name
    finally:
        client.close()


def main() -> None:
    address, token, pki = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    ca, cert, key = pki / "ca.pem", pki / "client.pem", pki / "client.key"
    mtls = {"tls_ca": ca, "tls_cert": cert, "tls_key": key}
    out = {
        "right client": code(address, token=token, **mtls),
        "no token": code(address, **mtls),
        "wrong token": code(address, token=token[::-1], **mtls),
        "no TLS": code(address, token=token),
        "other-CA certificate": code(address, token=token, tls_ca=ca, tls_cert=pki / "stranger.pem",
                                     tls_key=pki / "stranger.key"),
        "no client certificate": code(address, token=token, tls_ca=ca),
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
