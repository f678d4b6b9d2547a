"""`cascade demo`'s refusals, before it builds or starts anything (the demo itself:
tests/e2e/test_demo_live.py)."""

from __future__ import annotations

import os

import pytest

from services.cli.main import main


def test_an_unknown_float_path_is_one_line_naming_the_option_and_starts_nothing(tmp_path, capsys):
    home = tmp_path / "home"
    with pytest.raises(SystemExit) as exit_:
        main(["demo", "--float-path", "avx512", "--home", str(home)])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 1 and err == "error: --float-path: unknown float path 'avx512'; choose one of native, avx2"
    assert not home.exists()


def test_a_float_path_the_environment_contradicts_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    for key in ("MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(SystemExit):
        main(["demo", "--home", str(tmp_path / "home")])  # the default path, avx2
    assert "unset ATEN_CPU_CAPABILITY or choose the float path 'native'" in capsys.readouterr().err
    assert "MKL_ENABLE_INSTRUCTIONS" not in os.environ and "ONEDNN_MAX_CPU_ISA" not in os.environ, "a refused pin sets nothing"
