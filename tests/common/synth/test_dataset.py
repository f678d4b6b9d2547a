"""write_dataset and corpus_texts: layout, validity, determinism, disjoint splits, levels."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from services.common import synth
from services.common.errors import InvalidArgument
from services.common.synth import (
    DEFAULT_SIZES,
    REGISTRY,
    _draw_unique,
    corpus_texts,
    parse_domains,
    tool,
    write_dataset,
)
from services.common.tasks import TaskRecord, load_tasks

SMALL = {"n_train": 40, "n_val": 20, "n_sft": 30, "n_pref": 10}


def _prompt_of(messages: list[dict]) -> str:
    return "\n".join(f"{m['role']}: {m['content']}" for m in messages if m["role"] != "assistant")


def _bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.jsonl"))}


def test_every_domain_writes_loadable_files(synth_dir):
    for domain in REGISTRY:
        for split in ("train", "validation"):
            records = load_tasks(synth_dir / domain / f"{split}.jsonl")
            assert records and all(r.domain == domain for r in records)
            assert len({r.id for r in records}) == len(records)
        sft = [json.loads(line) for line in (synth_dir / domain / "sft.jsonl").open()]
        assert sft and all(
            s["messages"][-1]["role"] == "assistant" and s["messages"][-1]["content"] for s in sft
        )
        assert all(s["domain"] == domain for s in sft)
    prefs = load_tasks(synth_dir / "rlhf" / "preferences.jsonl")
    assert prefs and all(p.chosen and p.rejected is not None and p.chosen != p.rejected for p in prefs)


def test_train_validation_and_sft_validation_are_disjoint(synth_dir):
    for domain in REGISTRY:
        train = {r.prompt_text() for r in load_tasks(synth_dir / domain / "train.jsonl")}
        val = {r.prompt_text() for r in load_tasks(synth_dir / domain / "validation.jsonl")}
        sft = {_prompt_of(json.loads(line)["messages"]) for line in (synth_dir / domain / "sft.jsonl").open()}
        assert not train & val, domain
        assert not sft & val, domain


def test_levels_sft_easier_and_validation_holds_the_hardest(synth_dir):
    for domain in REGISTRY:
        val_levels = [r.metadata["level"] for r in load_tasks(synth_dir / domain / "validation.jsonl")]
        sft_levels = [json.loads(line)["metadata"]["level"] for line in (synth_dir / domain / "sft.jsonl").open()]
        assert set(val_levels) == {1, 2, 3}, domain
        assert val_levels.count(3) >= len(val_levels) / 6, domain
        if domain == "tool":  # 240 distinct one-call prompts: SFT holds at most those validation does not
            distinct = len(tool._OPENERS) * len(tool._WEATHER + tool._TIME) * len(tool.TOOL_CITIES)
            assert sft_levels.count(1) <= distinct - val_levels.count(1)
        assert sft_levels.count(3) <= 0.25 * len(sft_levels), domain  # SFT leans easy (unique draws skew it a little)
        assert sft_levels.count(1) > sft_levels.count(3), domain


def test_same_seed_is_byte_identical_and_other_seed_differs(tmp_path):
    write_dataset(tmp_path / "a", seed=3, **SMALL)
    write_dataset(tmp_path / "b", seed=3, **SMALL)
    write_dataset(tmp_path / "c", seed=4, **SMALL)
    a, b, c = (_bytes(tmp_path / x) for x in "abc")
    assert len(a) == 3 * len(REGISTRY) + 1
    assert a == b
    assert all(a[name] != c[name] for name in a)


def test_counts_and_domain_selection(tmp_path):
    counts = write_dataset(tmp_path, seed=0, domains=["math", "rlhf"], **SMALL)
    assert counts == {
        "math": {"train": 40, "validation": 20, "sft": 30},
        "rlhf": {"train": 40, "validation": 20, "sft": 30, "preferences": 10},
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["math", "rlhf"]
    assert sum(1 for _ in (tmp_path / "math" / "train.jsonl").open()) == 40


def test_bad_arguments_name_the_field(tmp_path):
    with pytest.raises(InvalidArgument) as err:
        write_dataset(tmp_path, seed=0, n_train=-1)
    assert err.value.field == "n_train"
    with pytest.raises(InvalidArgument) as err:
        write_dataset(tmp_path, seed=0, domains=["math", "chess"])
    assert err.value.field == "domains" and not any(tmp_path.iterdir())  # checked before writing
    with pytest.raises(InvalidArgument) as err:
        parse_domains("math,chess")
    assert err.value.field == "domains" and "chess" in err.value.message
    with pytest.raises(InvalidArgument) as err:  # more distinct prompts than a generator can make
        _draw_unique(lambda k: ["same"] * k, str, 2, set(), "n_val")
    assert err.value.field == "n_val" and "only 1 distinct" in err.value.message
    assert parse_domains("all") == list(REGISTRY) and parse_domains("if, math,if") == ["if", "math"]


def _stream(seed: int, space: int):
    """make(k): the next k draws of one stream of integers below `space`, as the generators draw."""
    rng = random.Random(seed)
    return lambda k: [rng.randrange(space) for _ in range(k)]


def test_a_nearly_exhausted_prompt_space_still_fills_and_rounds_keep_what_they_accept(monkeypatch):
    # every one of 200 prompts: a coupon collector's ~1200 draws, beyond 50 rounds of one missing item each
    assert sorted(_draw_unique(_stream(1, 200), str, 200, set(), "n_sft")) == list(range(200))
    monkeypatch.setattr(synth, "_MIN_DRAW", 1)
    with pytest.raises(InvalidArgument, match="only 19[0-9] distinct"):
        _draw_unique(_stream(1, 200), str, 200, set(), "n_sft")
    # where rounds of the missing count fill, larger rounds accept the same items in the same order
    small = _draw_unique(_stream(2, 400), str, 150, {"3", "5"}, "n_val")
    monkeypatch.setattr(synth, "_MIN_DRAW", 64)
    assert _draw_unique(_stream(2, 400), str, 150, {"3", "5"}, "n_val") == small


def test_more_validation_prompts_keep_the_first_ones_and_the_training_prompts(tmp_path):
    write_dataset(tmp_path / "a", seed=5, domains=["code", "if"], **SMALL)
    write_dataset(tmp_path / "b", seed=5, domains=["code", "if"], **{**SMALL, "n_val": 2 * SMALL["n_val"]})
    for domain in ("code", "if"):
        a, b = (load_tasks(tmp_path / x / domain / "validation.jsonl") for x in "ab")
        assert [r.prompt_text() for r in b[: len(a)]] == [r.prompt_text() for r in a]
        assert (tmp_path / "a" / domain / "train.jsonl").read_bytes() == (tmp_path / "b" / domain / "train.jsonl").read_bytes()


def test_task_ids_are_renumbered_and_unique_across_splits(synth_dir):
    ids = [
        r.id for split in ("train", "validation") for r in load_tasks(synth_dir / "math" / f"{split}.jsonl")
    ]
    assert ids[0] == "math-train-00000" and ids[-1] == f"math-validation-{DEFAULT_SIZES['n_val'] - 1:05d}"
    assert len(set(ids)) == len(ids)


def test_corpus_texts_cover_every_domain_fast_and_deterministic():
    start = time.perf_counter()
    texts = corpus_texts(seed=0)
    assert time.perf_counter() - start < 3.0
    assert 2000 <= len(texts) <= 10_000
    assert texts == corpus_texts(seed=0) and texts != corpus_texts(seed=1)
    joined = "\n".join(texts)
    for marker in (
        "\\boxed{",
        "```python",
        "<tool_call><function=",
        "```diff",
        "<think>\n",
        '{"name": ',
        "The secret code of",
        "Use only lowercase letters.",
        "Which number",
    ):
        assert marker in joined, marker


def test_generators_share_one_signature():
    import random

    for name, gen in REGISTRY.items():
        tasks = gen.make_tasks(random.Random(0), 3, "train")
        sft = gen.make_sft(random.Random(0), 3)
        assert [type(t) for t in tasks] == [TaskRecord] * 3 and len(sft) == 3, name
