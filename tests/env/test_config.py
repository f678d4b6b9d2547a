"""EnvConfig: settings from CASCADE_ENV_*, and the errors that say how to fix them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.env.config import EnvConfig


def test_settings_come_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("CASCADE_ENV_TOOL_TIMEOUT_S", "4.5")
    monkeypatch.setenv("CASCADE_ENV_WORKBENCH_TABLES", str(tmp_path))
    config = EnvConfig()
    assert config.tool_timeout_s == 4.5 and config.workbench_tables == tmp_path


@pytest.mark.parametrize("settings, message", [
    ({"default_deadline_s": 100, "max_deadline_s": 10}, "default_deadline_s (100.0) exceeds max_deadline_s"),
    ({"default_turns": 9, "max_turns": 4}, "default_turns (9) exceeds max_turns"),
    ({"workbench_tables": "/nonexistent/tables"}, "workbench_tables: /nonexistent/tables is not a folder"),
    ({"tool_output_chars": 10}, "tool_output_chars"),
])
def test_bad_settings_say_what_to_fix(settings, message):
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        EnvConfig(**settings)
