"""ApiSettings: loopback by default, a token required beyond loopback, errors that name the variable."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.api.config import ApiSettings, is_loopback


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.0.0.53", True), ("localhost", True), ("::1", True), ("[::1]", True),
    ("0.0.0.0", False), ("::", False), ("10.0.0.7", False), ("api.example.internal", False),
])
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_defaults_listen_on_loopback_without_a_token(monkeypatch):
    monkeypatch.delenv("CASCADE_API_TOKEN", raising=False)
    settings = ApiSettings()
    assert (settings.host, settings.port, settings.token) == ("127.0.0.1", 8000, None)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20"])
def test_beyond_loopback_without_a_token_is_refused(host):
    with pytest.raises(ValidationError, match="CASCADE_API_TOKEN is required .* beyond loopback"):
        ApiSettings(host=host)


def test_beyond_loopback_with_a_token_from_the_environment(monkeypatch):
    monkeypatch.setenv("CASCADE_API_HOST", "0.0.0.0")
    monkeypatch.setenv("CASCADE_API_TOKEN", "s3cret-token")
    assert ApiSettings().token == "s3cret-token"


def test_a_blank_token_counts_as_unset(monkeypatch):
    monkeypatch.setenv("CASCADE_API_TOKEN", "  ")
    assert ApiSettings().token is None
    with pytest.raises(ValidationError, match="CASCADE_API_TOKEN is required"):
        ApiSettings(host="0.0.0.0")


def test_a_token_with_spaces_is_refused():
    with pytest.raises(ValidationError, match="must not contain spaces"):
        ApiSettings(token="two words")


def test_bad_port_names_the_field(monkeypatch):
    monkeypatch.setenv("CASCADE_API_PORT", "70000")
    with pytest.raises(ValidationError, match="port"):
        ApiSettings()
