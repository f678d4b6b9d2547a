"""The token rules every server shares (services.common.tokens)."""

from __future__ import annotations

import pytest

from services.common.tokens import bearer, exposed_without_token, is_loopback, same_token


@pytest.mark.parametrize("header, token", [("Bearer abc", "abc"), ("bearer abc", "abc"), ("BEARER  abc ", "abc"),
                                           ("Basic abc", None), ("Bearer", None), ("", None), (None, None)])
def test_bearer_reads_the_token_whatever_the_schemes_case(header, token):
    assert bearer(header) == token


def test_same_token_is_exact():
    assert same_token("abc", "abc") and not same_token("abd", "abc") and not same_token(None, "abc")
    assert not same_token("ab", "abc")


@pytest.mark.parametrize("host, loop", [("127.0.0.1", True), ("127.3.0.1", True), ("::1", True), ("[::1]", True),
                                        ("localhost", True), ("0.0.0.0", False), ("::", False), ("10.9.0.2", False)])
def test_is_loopback(host, loop):
    assert is_loopback(host) is loop


def test_exposed_without_token_names_the_variables():
    assert exposed_without_token("127.0.0.1", None, "X_TOKEN", "X_HOST") is None
    assert exposed_without_token("10.9.0.2", "s", "X_TOKEN", "X_HOST") is None
    msg = exposed_without_token("10.9.0.2", None, "X_TOKEN", "X_HOST")
    assert "X_TOKEN is required" in msg and "X_HOST=10.9.0.2" in msg
    assert exposed_without_token("0.0.0.0", "  ", "X_TOKEN", "X_HOST") is not None
