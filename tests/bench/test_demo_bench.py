"""bench/demo_bench.py: the run counts per mode, and each run's own copy of the recipe."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import demo_bench  # noqa: E402

MODES = ["pool", "one-thread"]


def test_runs_one_count_for_every_mode_or_one_per_mode():
    assert demo_bench.runs_per_mode("3", MODES) == {"pool": 3, "one-thread": 3}
    assert demo_bench.runs_per_mode("pool=3,one-thread=1", MODES) == {"pool": 3, "one-thread": 1}


@pytest.mark.parametrize("text, words", [
    ("pool=3", "no count for ['one-thread']"),
    ("pool=3,one-thread=1,gpu=2", "'gpu' is not one of --modes"),
    ("0", "at least 1"),
    ("pool=x,one-thread=1", "invalid literal"),
])
def test_bad_run_counts_say_what_is_wrong(text, words):
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]")):
        demo_bench.runs_per_mode(text, MODES)


def test_every_run_builds_its_own_model_in_its_home(tmp_path):
    recipe = tmp_path / "demo.yaml"
    recipe.write_text(yaml.safe_dump({"name": "demo", "seed": 3, "model": ".cascade/models/tiny", "stages": []}))
    home = tmp_path / "home"
    home.mkdir()
    copy = yaml.safe_load(demo_bench.own_model(recipe, home).read_text())
    assert copy == {"name": "demo", "seed": 3, "model": str(home / "models" / "tiny"), "stages": []}
