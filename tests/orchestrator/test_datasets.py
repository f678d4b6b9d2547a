"""Data folders of a cascade: `synthetic` is written once per seed and sizes; a bad path names `data`."""

import json

import pytest

from services.common.errors import InvalidArgument
from services.common.synth import DEFAULT_SIZES
from services.orchestrator import datasets


def test_synthetic_data_is_written_once_under_a_name_that_carries_its_sizes(tmp_path):
    first = datasets.resolve_data_dir("synthetic", tmp_path, seed=3)
    assert first.name == "synthetic-seed3-" + "-".join(str(n) for n in DEFAULT_SIZES.values())
    validation = datasets.tasks(first, ["mcqa"], "validation")
    assert len(validation) == DEFAULT_SIZES["n_val"]
    stamp = (first / "mcqa" / "validation.jsonl").stat().st_mtime_ns
    assert datasets.resolve_data_dir("synthetic", tmp_path, seed=3) == first
    assert (first / "mcqa" / "validation.jsonl").stat().st_mtime_ns == stamp, "not written again"
    assert not [p for p in first.parent.iterdir() if p.name.startswith(".synth-")], "no temporary folder left"


def test_a_data_path_that_is_not_a_folder_names_the_field(tmp_path):
    with pytest.raises(InvalidArgument, match="data"):
        datasets.resolve_data_dir(str(tmp_path / "missing"), tmp_path, seed=0)


def test_a_folder_names_the_domain_of_rows_that_name_none(tmp_path):
    (tmp_path / "math").mkdir()
    (tmp_path / "math" / "train.jsonl").write_text(json.dumps({"id": 7, "prompt": "1 + 1?", "ground_truth": "2"}) + "\n")
    (tmp_path / "mcqa").mkdir()
    row = {"uuid": "u1", "responses_create_params": {"input": [{"role": "user", "content": "A or B?"}]},
           "options": [{"A": "yes"}, {"B": "no"}], "expected_answer": "B", "grading_mode": "strict_single_letter_boxed"}
    (tmp_path / "mcqa" / "train.jsonl").write_text(json.dumps(row) + "\n")
    got = datasets.tasks(tmp_path, ["math", "mcqa"], "train")
    assert [(r.id, r.domain) for r in got] == [("7", "math"), ("u1", "mcqa")]
