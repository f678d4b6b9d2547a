"""Bearer-token checks of the control API, as pure functions.

A request is let in when no token is configured, when it carries `Authorization: Bearer <token>`,
or (read-only methods only) when it carries the page's cookie, which `/?token=<token>` sets once so
a browser can open the run page. Mutating calls always need the header, so a cookie alone can never
submit or cancel a run. This module knows nothing about routes.
"""

from __future__ import annotations

import hmac

COOKIE = "cascade_api_token"
READ_ONLY = ("GET", "HEAD")
PUBLIC_PATHS = ("/healthz",)
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="cascade"'}


def bearer(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header (scheme case-insensitive), else None."""
    if not authorization:
        return None
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return value.strip() or None


def same_token(given: str | None, expected: str) -> bool:
    """Constant-time comparison, so response time does not leak how much of a guess was right."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def allowed(expected: str | None, path: str, method: str, authorization: str | None, cookie: str | None) -> bool:
    """Whether a request may proceed (see the module docstring)."""
    if expected is None or path in PUBLIC_PATHS:
        return True
    if same_token(bearer(authorization), expected):
        return True
    return method.upper() in READ_ONLY and same_token(cookie, expected)
