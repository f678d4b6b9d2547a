"""`cascade data synth`: in-process through typer, and once as the installed console command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from services.cli.data import app
from services.common.tasks import load_tasks

runner = CliRunner()


def test_synth_writes_selected_domains_and_prints_counts(tmp_path):
    result = runner.invoke(
        app,
        [
            "synth",
            "--out",
            str(tmp_path),
            "--seed",
            "5",
            "--domains",
            "math,tool",
            "--train",
            "12",
            "--val",
            "6",
            "--sft",
            "4",
        ],
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["math", "tool"]
    assert len(load_tasks(tmp_path / "tool" / "train.jsonl")) == 12
    assert len(load_tasks(tmp_path / "math" / "validation.jsonl")) == 6
    assert "math" in result.output and "12" in result.output and "tool" in result.output


def test_synth_rejects_unknown_domain_and_negative_size(tmp_path):
    result = runner.invoke(app, ["synth", "--out", str(tmp_path), "--domains", "math,chess"])
    assert result.exit_code != 0 and "chess" in str(result.exception)
    result = runner.invoke(app, ["synth", "--out", str(tmp_path), "--train", "-3"])
    assert result.exit_code == 2 and "--train" in result.output
    assert not any(tmp_path.iterdir())


def test_console_command_is_deterministic_and_errors_are_one_line(tmp_path):
    exe = Path(sys.executable).parent / "cascade"  # the console script installed next to this python
    args = ["data", "synth", "--domains", "if,swe", "--train", "8", "--val", "4", "--sft", "4"]
    for name in ("a", "b"):
        done = subprocess.run(
            [str(exe), *args, "--out", str(tmp_path / name)],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
    for rel in ("if/train.jsonl", "swe/validation.jsonl", "swe/sft.jsonl"):
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes()
    bad = subprocess.run(
        [str(exe), "data", "synth", "--out", str(tmp_path / "c"), "--domains", "nope"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert bad.returncode == 1
    assert bad.stderr.strip().startswith("error: domains: unknown domain") and "Traceback" not in bad.stderr


def test_synth_env_writes_episode_tasks_and_played_conversations_and_refuses_a_clash(tmp_path):
    import json

    result = runner.invoke(app, ["synth", "--out", str(tmp_path / "a"), "--domains", "tool", "--env", "workbench",
                                 "--train", "3", "--val", "2", "--sft", "4"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "a" / "workbench").iterdir()) == ["sft.jsonl", "train.jsonl",
                                                                               "validation.jsonl"]
    rows = [json.loads(line) for line in (tmp_path / "a" / "workbench" / "sft.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(any(m["role"] == "tool" for m in r["messages"]) for r in rows)
    result = runner.invoke(app, ["synth", "--out", str(tmp_path / "b"), "--env", "swe"])
    assert result.exit_code != 0 and "env: ['swe'] would overwrite the domain(s) of the same name" in str(result.exception)
    result = runner.invoke(app, ["synth", "--out", str(tmp_path / "b"), "--domains", "tool", "--env", "chess"])
    assert result.exit_code != 0 and "unknown environment(s) ['chess']" in str(result.exception)
    assert not (tmp_path / "b").exists()


def test_synth_env_sft_sizes_the_environments_conversations_apart_from_the_domains(tmp_path):
    """--env-sft: the environment's conversations in their own number (a domain's SFT pool may hold fewer
    prompts than an agentic SFT needs); --sft still sizes the domains'."""
    result = runner.invoke(app, ["synth", "--out", str(tmp_path), "--domains", "tool", "--env", "python",
                                 "--train", "3", "--val", "2", "--sft", "4", "--env-sft", "7"])
    assert result.exit_code == 0, result.output
    assert len((tmp_path / "python" / "sft.jsonl").read_text().splitlines()) == 7
    assert len((tmp_path / "tool" / "sft.jsonl").read_text().splitlines()) == 4
