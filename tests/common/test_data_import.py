"""`cascade data import`: released files into `<domain>/{train,validation}.jsonl`, rows unchanged, a
seeded held-out split, bad lines reported with file and line, and 100k rows in bounded memory."""

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.cli.main import main
from services.common.data_import import held_out, import_folder
from services.common.errors import InvalidArgument
from services.orchestrator import datasets
from tests.common.test_nemo_gym import SAMPLES, needs_samples

ROOT = Path(__file__).resolve().parents[2]


def if_row(i: int, pad: str = "") -> dict:
    return {"id": i, "instruction_id_list": ["punctuation:no_comma"], "prompt": f"q{i}{pad}", "kwargs": [None],
            "responses_create_params": {"input": [{"role": "user", "content": f"q{i}{pad}"}]}}


def mcqa_row(i: int, pad: str = "") -> dict:
    return {"uuid": f"u{i}", "responses_create_params": {"input": [{"role": "user", "content": f"pick {i}{pad}"}]},
            "options": [{"A": "x"}, {"B": "y"}], "expected_answer": "B", "grading_mode": "strict_single_letter_boxed"}


def test_held_out_depends_on_seed_and_key_only():
    keys = [f"if:{i}" for i in range(2000)]
    share = sum(held_out(0, k, 0.1) for k in keys) / len(keys)
    assert 0.07 < share < 0.13
    assert [held_out(0, k, 0.1) for k in keys] == [held_out(0, k, 0.1) for k in keys]
    assert [held_out(0, k, 0.1) for k in keys] != [held_out(1, k, 0.1) for k in keys]
    assert not any(held_out(0, k, 0.0) for k in keys) and all(held_out(0, k, 1.0) for k in keys)


def test_mixed_files_split_by_domain_rows_unchanged_and_bad_lines_reported(tmp_path):
    src = tmp_path / "download"
    (src / "MOPD").mkdir(parents=True)
    lines = [json.dumps(if_row(1)), "{not json", json.dumps(mcqa_row(2)), json.dumps({"prompt": "x"}),
             json.dumps(if_row(1)), json.dumps({**if_row(1), "prompt": "other"})]
    (src / "MOPD" / "train.jsonl").write_text("\n".join(lines) + "\n")
    with gzip.open(src / "if.jsonl.gz", "wt") as f:
        f.write("".join(json.dumps(if_row(i)) + "\n" for i in range(10, 40)))
    report = import_folder(src, tmp_path / "data", seed=3, val_fraction=0.2, val_max=4)
    assert report.malformed == 2 and report.duplicates == 2
    where = [p.split(": ", 1)[0] for p in report.problems]
    assert where == [f"{src}/MOPD/train.jsonl:2", f"{src}/MOPD/train.jsonl:4", f"{src}/MOPD/train.jsonl:6"]
    assert "taken by" in report.problems[2]
    assert report.counts["if"]["train"] + report.counts["if"]["validation"] == 31
    assert 1 <= report.counts["if"]["validation"] <= 4
    assert dict(report.counts["mcqa"]) in ({"train": 1}, {"validation": 1})
    written = (tmp_path / "data" / "mcqa" / "train.jsonl").read_text() + (tmp_path / "data" / "mcqa" / "validation.jsonl").read_text()
    assert written == lines[2] + "\n"  # byte for byte
    train = datasets.tasks(tmp_path / "data", ["if", "mcqa"], "train")
    val = datasets.tasks(tmp_path / "data", ["if", "mcqa"], "validation")
    assert not {r.id for r in train} & {r.id for r in val}
    again = import_folder(src, tmp_path / "again", seed=3, val_fraction=0.2, val_max=4)
    assert again.counts == report.counts


def test_refusals_name_the_argument(tmp_path):
    with pytest.raises(InvalidArgument, match="dir"):
        import_folder(tmp_path / "absent", tmp_path / "out")
    with pytest.raises(InvalidArgument, match="no .jsonl"):
        import_folder(tmp_path, tmp_path / "out")
    (tmp_path / "a.jsonl").write_text(json.dumps(if_row(1)) + "\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("")
    with pytest.raises(InvalidArgument, match="not empty"):
        import_folder(tmp_path, tmp_path / "out")


@needs_samples
def test_cli_imports_the_shared_rows_and_prints_counts(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    (src / "samples.jsonl").write_text(SAMPLES.read_text())
    main(["data", "import", str(src), "--out", str(tmp_path / "data"), "--val-fraction", "0"])
    out = capsys.readouterr().out
    for domain, n in [("if", 5), ("mcqa", 4), ("structured", 3), ("swe", 2), ("workbench", 3)]:
        assert any(line.split("│")[1:3] == [f" {domain} ".ljust(len(line.split("│")[1])), f" {n} ".rjust(len(line.split("│")[2]))]
                   for line in out.splitlines() if line.count("│") >= 3), (domain, out)
    assert "malformed lines left out: 0" in out


@pytest.mark.slow  # ~10 s on an idle machine, ~45 s on 2 shared cores: 100k rows through the record loader
def test_100k_rows_import_in_bounded_memory(tmp_path):
    """Peak RSS of the import grows by far less than the file: rows stream, never the whole file."""
    src = tmp_path / "src"
    src.mkdir()
    pad = " lorem ipsum dolor sit amet" * 16
    with (src / "rl.jsonl").open("w") as f:
        for i in range(50_000):
            f.write(json.dumps(if_row(i, pad)) + "\n" + json.dumps(mcqa_row(i, pad)) + "\n")
    size_mb = (src / "rl.jsonl").stat().st_size / 2**20
    probe = ("import resource, sys; from services.cli.main import main\n"
             "rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024\n"
             "before = rss(); main(['data', 'import', sys.argv[1], '--out', sys.argv[2]])\n"
             "print('PEAK', before, rss())")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-c", probe, str(src), str(tmp_path / "data")],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    before, after = map(int, run.stdout.rsplit("PEAK", 1)[1].split())
    rows = sum(1 for _ in (tmp_path / "data" / "if" / "train.jsonl").open()) + sum(1 for _ in (tmp_path / "data" / "if" / "validation.jsonl").open())
    assert rows == 50_000 and size_mb > 60
    print(f"100k rows, {size_mb:.0f} MB: peak RSS {before} MB after imports, {after} MB after the import")
    assert after - before < 30, f"import grew peak RSS by {after - before} MB for a {size_mb:.0f} MB file"
