"""`python -m services.common.healthcheck ADDRESS`: exit 0 when a gRPC service says SERVING.

The container health check of every Cascade gRPC service (compose.yaml). It asks the standard
gRPC health service (which needs no bearer token) once, with a deadline, over plaintext or — with
`--tls-ca` — TLS (with `--tls-cert/--tls-key` when the server wants a client certificate), and
prints one line. Exit codes: 0 SERVING, 1 anything else (NOT_SERVING,
unreachable, bad address). It knows nothing about what the service does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def check(address: str, service: str = "", timeout: float = 3.0, tls_ca: Path | None = None,
          server_name: str | None = None, tls_cert: Path | None = None, tls_key: Path | None = None) -> str:
    """The health status name of `service` at `address` (SERVING, NOT_SERVING, ...); raises grpc.RpcError."""
    if tls_ca is None:
        channel = grpc.insecure_channel(address)
    else:
        creds = grpc.ssl_channel_credentials(
            Path(tls_ca).read_bytes(),
            private_key=Path(tls_key).read_bytes() if tls_key else None,
            certificate_chain=Path(tls_cert).read_bytes() if tls_cert else None,
        )
        options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
        channel = grpc.secure_channel(address, creds, options)
    with channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service),
                                                          timeout=timeout)
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.common.healthcheck", description=__doc__.splitlines()[0])
    parser.add_argument("address", help="host:port of the gRPC service, e.g. 127.0.0.1:50051")
    parser.add_argument("--service", default="", help="health service name (default: the whole server)")
    parser.add_argument("--timeout", type=float, default=3.0, help="deadline in seconds (default 3)")
    parser.add_argument("--tls-ca", type=Path, default=None, help="PEM CA bundle: check over TLS")
    parser.add_argument("--server-name", default=None, help="TLS: the name the certificate was issued for")
    parser.add_argument("--tls-cert", type=Path, default=None, help="TLS: client certificate (mutual TLS)")
    parser.add_argument("--tls-key", type=Path, default=None, help="TLS: key of --tls-cert")
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        print("healthcheck: --timeout must be > 0", file=sys.stderr)
        return 1
    if (args.tls_cert is None) != (args.tls_key is None):
        print("healthcheck: --tls-cert and --tls-key go together", file=sys.stderr)
        return 1
    try:
        status = check(args.address, args.service, args.timeout, args.tls_ca, args.server_name,
                       args.tls_cert, args.tls_key)
    except grpc.RpcError as err:
        print(f"healthcheck: {args.address}: {err.code().name}: {err.details()}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as err:
        print(f"healthcheck: {args.address}: {err}", file=sys.stderr)
        return 1
    print(f"{args.address}: {status}")
    return 0 if status == "SERVING" else 1


if __name__ == "__main__":
    sys.exit(main())
