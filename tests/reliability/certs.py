"""A throwaway certificate authority for TLS tests, made with the `openssl` command line.

`make_pki(dir)` writes a CA, a server certificate for 127.0.0.1 / localhost signed by it, a client
certificate signed by it, and a second, unrelated CA with its own client certificate (a stranger
the server must refuse). Keys are EC P-256; everything lives one day.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path
    stranger_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(d: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
             "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.pem", cwd=d)


def _leaf(d: Path, name: str, ca: str, san: str | None) -> None:
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", f"/CN={name}",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
    ext = d / f"{name}.ext"
    ext.write_text(f"subjectAltName={san}\n" if san else "extendedKeyUsage=clientAuth\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-days", "1", "-extfile", ext.name, "-out", f"{name}.pem", cwd=d)


def make_pki(d: Path, server_san: str = "IP:127.0.0.1,DNS:localhost") -> Pki:
    """The CA, server (for `server_san`), client and stranger files under `d`."""
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    _ca(d, "ca")
    _ca(d, "other-ca")
    _leaf(d, "server", "ca", server_san)
    _leaf(d, "client", "ca", None)
    _leaf(d, "stranger", "other-ca", None)
    return Pki(d / "ca.pem", d / "server.pem", d / "server.key", d / "client.pem", d / "client.key",
               d / "stranger.pem", d / "stranger.key")
