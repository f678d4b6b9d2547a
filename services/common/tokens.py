"""Bearer tokens and where a server may listen without one: one rule for every service and the API.

Pure functions: `bearer` reads an `Authorization` value (scheme case-insensitive, RFC 6750),
`same_token` compares in constant time, `is_loopback` says whether a bind address stays on this
machine, and `exposed_without_token` is the refusal every server applies before it binds.
"""

from __future__ import annotations

import hmac
import ipaddress

LOOPBACK_NAMES = ("localhost", "ip6-localhost")


def bearer(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` value (scheme case-insensitive), else None."""
    if not authorization:
        return None
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return value.strip() or None


def same_token(given: str | None, expected: str) -> bool:
    """Constant-time comparison, so response time does not leak how much of a guess was right."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and `localhost`; False for 0.0.0.0, :: and any other address or name."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def exposed_without_token(host: str, token: str | None, variable: str, host_variable: str) -> str | None:
    """The refusal (a message naming the variables) when `host` is beyond loopback and no token is set, else None."""
    if token is not None and token.strip() or is_loopback(host):
        return None
    return (f"{variable} is required when the server listens beyond loopback ({host_variable}={host}); "
            "set it to a long random secret, or bind 127.0.0.1")
