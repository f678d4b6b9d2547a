"""Settings from CASCADE_* variables, readable errors, and local-only model loading."""

import pytest
from pydantic import ValidationError

from services.common.errors import InvalidArgument
from services.common.modelio import architecture_of, resolve_uri
from services.common.settings import CommonSettings, ServerSettings, format_validation_error


def test_settings_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("CASCADE_LOG_LEVEL", "DEBUG")
    monkeypatch.setenv("CASCADE_SERVER_PORT", "50123")
    assert CommonSettings().log_level == "DEBUG"
    assert ServerSettings().port == 50123
    assert ServerSettings().host == "127.0.0.1", "services bind to loopback by default"


def test_a_bad_value_names_the_variable_and_value(monkeypatch):
    monkeypatch.setenv("CASCADE_SERVER_PORT", "70000")
    with pytest.raises(ValidationError) as info:
        ServerSettings()
    line = format_validation_error(info.value, "environment")
    assert line.startswith("environment: port:") and "70000" in line


def test_resolve_uri_accepts_paths_and_file_uris(tmp_path):
    assert resolve_uri(str(tmp_path)) == tmp_path
    assert resolve_uri(f"file://{tmp_path}") == tmp_path
    with pytest.raises(InvalidArgument, match="weights.uri: .* does not exist"):
        resolve_uri(tmp_path / "missing", "weights.uri")
    with pytest.raises(InvalidArgument, match="scheme 'https' is not supported"):
        resolve_uri("https://example.invalid/model")


def test_architecture_of_reads_config_without_weights(tmp_path):
    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "vocab_size": 2048}')
    assert architecture_of(tmp_path) == ("LlamaForCausalLM", 2048)
    with pytest.raises(InvalidArgument, match="no config.json"):
        architecture_of(tmp_path.parent)
