"""The bearer-token rules as pure functions."""

from __future__ import annotations

import pytest

from services.api.auth import allowed, bearer

TOKEN = "abc123"


@pytest.mark.parametrize(("header", "token"), [
    ("Bearer abc", "abc"), ("bearer abc", "abc"), ("  Bearer   abc  ", "abc"),
    ("Basic abc", None), ("Bearer", None), ("Bearer  ", None), ("", None), (None, None), ("abc", None),
])
def test_bearer(header, token):
    assert bearer(header) == token


@pytest.mark.parametrize(("expected", "path", "method", "header", "cookie", "ok"), [
    (None, "/runs", "POST", None, None, True),                     # no token configured: open (loopback only)
    (TOKEN, "/healthz", "GET", None, None, True),                  # health is always public
    (TOKEN, "/runs", "GET", None, None, False),
    (TOKEN, "/runs", "GET", "Bearer wrong", None, False),
    (TOKEN, "/runs", "GET", f"Bearer {TOKEN}", None, True),
    (TOKEN, "/runs", "POST", f"Bearer {TOKEN}", None, True),
    (TOKEN, "/runs", "GET", None, TOKEN, True),                    # the page's cookie may read
    (TOKEN, "/runs", "POST", None, TOKEN, False),                  # ... but never write
    (TOKEN, "/runs/1/cancel", "POST", None, TOKEN, False),
    (TOKEN, "/metrics", "GET", None, "wrong", False),
    (TOKEN, "/openapi.json", "GET", "Bearer abc12", None, False),  # a prefix of the token is not the token
])
def test_allowed(expected, path, method, header, cookie, ok):
    assert allowed(expected, path, method, header, cookie) is ok
