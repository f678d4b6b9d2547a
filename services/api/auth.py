"""Bearer-token checks of the control API, as pure functions (the token rules themselves: services.common.tokens).

A request is let in when no token is configured, when it carries `Authorization: Bearer <token>`,
or (read-only methods only) when it carries the page's cookie, which `/?token=<token>` sets once so
a browser can open the run page. Mutating calls always need the header, so a cookie alone can never
submit or cancel a run. This module knows nothing about routes.
"""

from __future__ import annotations

from services.common.tokens import bearer, same_token

__all__ = ["allowed", "bearer", "same_token", "COOKIE", "CHALLENGE"]
COOKIE = "cascade_api_token"
READ_ONLY = ("GET", "HEAD")
PUBLIC_PATHS = ("/healthz",)
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="cascade"'}


def allowed(expected: str | None, path: str, method: str, authorization: str | None, cookie: str | None) -> bool:
    """Whether a request may proceed (see the module docstring)."""
    if expected is None or path in PUBLIC_PATHS:
        return True
    if same_token(bearer(authorization), expected):
        return True
    return method.upper() in READ_ONLY and same_token(cookie, expected)
