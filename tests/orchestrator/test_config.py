"""Orchestrator settings: embedded defaults under home, URLs and addresses from the environment."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.orchestrator.config import OrchestratorSettings


def test_embedded_defaults_live_under_home(tmp_path):
    s = OrchestratorSettings(home=tmp_path / "h")
    assert s.broker() == f"sqla+sqlite:///{tmp_path}/h/broker.sqlite"
    assert s.backend() == f"db+sqlite:///{tmp_path}/h/results.sqlite"
    assert s.ledger() == f"sqlite:///{tmp_path}/h/ledger.sqlite"
    assert not (tmp_path / "h").exists()  # resolving a URL has no side effect


def test_environment_prefix_and_home_fallback(monkeypatch, tmp_path):
    monkeypatch.setenv("CASCADE_HOME", str(tmp_path / "common"))
    monkeypatch.setenv("CASCADE_ORCH_BROKER_URL", "redis://127.0.0.1:6379/3")
    monkeypatch.setenv("CASCADE_ORCH_TEACHER_ADDRESSES", '{"code": "10.0.0.7:50052"}')
    s = OrchestratorSettings()
    assert s.broker() == "redis://127.0.0.1:6379/3"
    assert s.ledger().endswith("/common/ledger.sqlite")
    assert (s.teacher_for("code"), s.teacher_for("if")) == ("10.0.0.7:50052", s.teacher_address)
    monkeypatch.setenv("CASCADE_ORCH_HOME", str(tmp_path / "own"))
    assert OrchestratorSettings().ledger().endswith("/own/ledger.sqlite")


def test_unsupported_broker_is_named(tmp_path):
    with pytest.raises(ValueError, match="CASCADE_ORCH_BROKER_URL: unsupported broker 'kafka://x'"):
        OrchestratorSettings(home=tmp_path, broker_url="kafka://x").broker()


@pytest.mark.parametrize(("field", "value"), [
    ("visibility_timeout_s", 0), ("policy_address", "no-port"), ("teacher_addresses", {"code": "x"}),
    ("queue_prefix", "Bad Prefix"),
])
def test_bad_values_name_the_field(field, value):
    with pytest.raises(ValidationError) as info:
        OrchestratorSettings(**{field: value})
    assert info.value.errors()[0]["loc"][0] == field
