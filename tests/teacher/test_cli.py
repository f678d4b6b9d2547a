"""`cascade teacher score` in-process: JSONL in, log-probs out, one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from services.cli.main import main
from services.teacher.config import TeacherConfig
from services.teacher.core import TeacherCore

LINES = [
    {"prompt_ids": [5, 6, 7], "completion_ids": [10, 11], "domain": "math"},
    {"prompt_ids": [5, 6, 7], "completion_ids": [12]},
    {"prompt_ids": [8, 9], "completion_ids": [13, 14, 15], "domain": "if"},
]


def write(path, lines):
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def test_in_process_scores_match_the_core(tiny_model_dir, tmp_path, capsys):
    src = write(tmp_path / "in.jsonl", LINES)
    main(["teacher", "score", "--input", str(src), "--model", str(tiny_model_dir), "--top-k", "3"])
    out = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    core = TeacherCore(TeacherConfig())
    core.load_teacher("t", str(tiny_model_dir))
    ref = core.score("t", [np.array(x["prompt_ids"]) for x in LINES], [np.array(x["completion_ids"]) for x in LINES], [0, 1, 2], 3)
    assert len(out) == 3
    for rec, s in zip(out, ref.scores):
        np.testing.assert_allclose(rec["logprobs"], s.logprobs, atol=1e-5)
        assert np.array(rec["topk_ids"]).shape == (len(s.logprobs), 3)
        assert np.array(rec["topk_ids"]).reshape(-1).tolist() == s.topk_ids.tolist()


def test_output_file(tiny_model_dir, tmp_path):
    src, dst = write(tmp_path / "in.jsonl", LINES[:1]), tmp_path / "out.jsonl"
    main(["teacher", "score", "-i", str(src), "--model", str(tiny_model_dir), "-o", str(dst)])
    rec = json.loads(dst.read_text())
    assert list(rec) == ["logprobs"] and len(rec["logprobs"]) == 2 and all(v < 0 for v in rec["logprobs"])


@pytest.mark.parametrize(
    "lines, extra, needle",
    [
        (["{not json"], ["--model", "M"], "in.jsonl:1: not valid JSON"),
        ([{"prompt_ids": [1], "completion_ids": ["a"]}], ["--model", "M"], "completion_ids must be a list of integer"),
        ([{"completion_ids": [1]}], ["--model", "M"], "prompt_ids must be a list"),
        ([], ["--model", "M"], "no sequences"),
        (LINES, [], "exactly one of --model"),
        (LINES, ["--model", "M", "--server", "127.0.0.1:1"], "exactly one of --model"),
        ([{"prompt_ids": [1], "completion_ids": [99999]}], ["--model", "M"], "completion_ids[0]"),
        (LINES, ["--model", "M", "--temperature", "0"], "temperature"),
        (LINES, ["--server", "127.0.0.1:1", "--backend", "vllm"], "--backend chooses the in-process teacher"),
    ],
)
def test_bad_input_is_one_error_line(tiny_model_dir, tmp_path, capsys, lines, extra, needle):
    src = write(tmp_path / "in.jsonl", lines)
    args = [a if a != "M" else str(tiny_model_dir) for a in extra]
    with pytest.raises(SystemExit) as exit_:
        main(["teacher", "score", "--input", str(src), *args])
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
