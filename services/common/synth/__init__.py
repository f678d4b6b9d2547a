"""Synthetic tasks for every domain: the registry, `write_dataset` and the tokenizer corpus.

`REGISTRY` maps a domain name to its generator module; every module has the same two functions,
`make_tasks(rng, n, split)` and `make_sft(rng, n)` (see `base.DomainGenerator`). `write_dataset`
writes `<out>/<domain>/{train,validation,sft}.jsonl` (+ `rlhf/preferences.jsonl`), byte-identical
for a seed, with no prompt shared between train and validation nor between SFT and validation.
`corpus_texts(seed)` renders SFT conversations of all domains, for training the tokenizer.
This package knows nothing about tokenizers, models or the CLI.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from functools import partial
from pathlib import Path

from services.common.errors import InvalidArgument
from services.common.synth import code, ifeval, long_context, math, mcqa, rlhf, structured, swe, tool
from services.common.synth.base import DomainGenerator
from services.common.tasks import TaskRecord, task_to_json

REGISTRY: dict[str, DomainGenerator] = {
    "math": math,
    "code": code,
    "if": ifeval,
    "mcqa": mcqa,
    "structured": structured,
    "tool": tool,
    "rlhf": rlhf,
    "long_context": long_context,
    "swe": swe,
}
DEFAULT_SIZES = {"n_train": 256, "n_val": 128, "n_sft": 768, "n_pref": 256}
"""768 SFT conversations per domain: with 256 the demo's 600 SFT steps showed each one ~5 times and
the tiny model came out weaker (code 0.18, structured 0.58) than with 768 seen ~2 times (0.52, 0.64).
128 validation prompts: at 64 the 95 % interval of a paired gain was about +-0.07, as wide as IF-RL's
gain in one seed of the demo (+0.07 [+0.00, +0.14]); twice the prompts narrow it by about 1/sqrt(2).
The first 64 are the ones a draw of 64 gives; SFT excludes every validation prompt, so it changes."""
_MAX_ROUNDS = 50
_MIN_DRAW = 64
"""Items drawn a round at least: when few distinct prompts are left (code's SFT beside 128 validation
prompts), rounds of one item ran out of rounds one prompt short. The generators draw item after item
from one stream, so a larger round keeps what a smaller one accepted: the same files, sooner."""


def parse_domains(text: str | None) -> list[str]:
    """ "math,code" -> ["math", "code"]; None or "" or "all" -> every registered domain."""
    if not text or text == "all":
        return list(REGISTRY)
    names = [d.strip() for d in text.split(",") if d.strip()]
    unknown = [d for d in names if d not in REGISTRY]
    if unknown:
        raise InvalidArgument("domains", f"unknown domain(s) {unknown}; choose from {list(REGISTRY)}")
    return list(dict.fromkeys(names))


def _rng(seed: int, domain: str, part: str) -> random.Random:
    """An independent, reproducible stream per (seed, domain, part)."""
    return random.Random(f"cascade-synth:{seed}:{domain}:{part}")


def _sft_key(record: dict) -> str:
    """The prompt of an SFT record, in the form of `TaskRecord.prompt_text`."""
    return "\n".join(f"{m['role']}: {m['content']}" for m in record["messages"] if m["role"] != "assistant")


def _tasks_of(gen: DomainGenerator, rng: random.Random, split: str, n: int) -> list[TaskRecord]:
    return gen.make_tasks(rng, n, split)


def _draw_unique(make: Callable[[int], list], key: Callable, n: int, exclude: set[str], what: str) -> list:
    """`n` items from `make(k)` whose keys are distinct and not in `exclude` (drawing more if needed)."""
    out: list = []
    seen = set(exclude)
    for _ in range(_MAX_ROUNDS):
        if len(out) >= n:
            break
        for item in make(max(n - len(out), _MIN_DRAW)):
            k = key(item)
            if k not in seen and len(out) < n:
                seen.add(k)
                out.append(item)
    if len(out) < n:
        raise InvalidArgument(
            what, f"only {len(out)} distinct prompts found for {n} requested; ask for fewer"
        )
    return out


def _write_lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def write_dataset(
    out_dir: str | Path,
    seed: int = 0,
    n_train: int = DEFAULT_SIZES["n_train"],
    n_val: int = DEFAULT_SIZES["n_val"],
    n_sft: int = DEFAULT_SIZES["n_sft"],
    n_pref: int = DEFAULT_SIZES["n_pref"],
    domains: list[str] | None = None,
    on_domain: Callable[[str], None] | None = None,
) -> dict[str, dict[str, int]]:
    """Write every domain's train / validation / SFT JSONL; returns {domain: {file stem: count}}."""
    for name, value in (("n_train", n_train), ("n_val", n_val), ("n_sft", n_sft), ("n_pref", n_pref)):
        if value < 0:
            raise InvalidArgument(name, f"must be >= 0, got {value}")
    unknown = [d for d in domains or [] if d not in REGISTRY]
    if unknown:
        raise InvalidArgument("domains", f"unknown domain(s) {unknown}; choose from {list(REGISTRY)}")
    out = Path(out_dir)
    counts: dict[str, dict[str, int]] = {}
    for domain in domains or list(REGISTRY):
        gen = REGISTRY[domain]
        prompt_of = TaskRecord.prompt_text
        splits: dict[str, list[TaskRecord]] = {}
        exclude: set[str] = set()
        for split, n, arg in (("train", n_train, "n_train"), ("validation", n_val, "n_val")):
            make = partial(_tasks_of, gen, _rng(seed, domain, split), split)
            drawn = _draw_unique(make, prompt_of, n, exclude, arg)
            splits[split] = [
                r.model_copy(update={"id": f"{domain}-{split}-{i:05d}"}) for i, r in enumerate(drawn)
            ]
            # validation excludes the train prompts; SFT excludes the validation prompts
            exclude = {prompt_of(r) for r in splits[split]}
        sft = _draw_unique(
            partial(gen.make_sft, _rng(seed, domain, "sft")), _sft_key, n_sft, exclude, "n_sft"
        )
        for i, record in enumerate(sft):
            record["id"] = f"{domain}-sft-{i:05d}"
        for split, records in splits.items():
            _write_lines(out / domain / f"{split}.jsonl", [task_to_json(r) for r in records])
        _write_lines(
            out / domain / "sft.jsonl",
            [json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in sft],
        )
        counts[domain] = {"train": n_train, "validation": n_val, "sft": n_sft}
        if domain == "rlhf":
            prefs = rlhf.make_preferences(_rng(seed, domain, "preferences"), n_pref)
            _write_lines(out / domain / "preferences.jsonl", [task_to_json(r) for r in prefs])
            counts[domain]["preferences"] = n_pref
        if on_domain is not None:
            on_domain(domain)
    return counts


def corpus_texts(seed: int = 0, per_domain: int = 400) -> list[str]:
    """Rendered SFT conversations (and rejected RLHF answers) of every domain, for the tokenizer.

    Deterministic by `seed`; a few thousand short texts (long_context ones are a few hundred words).
    """
    texts: list[str] = []
    for domain, gen in REGISTRY.items():
        n = per_domain // 4 if domain == "long_context" else per_domain
        for record in gen.make_sft(_rng(seed, domain, "corpus"), n):
            texts.append("\n".join(m["content"] for m in record["messages"]))
    for pair in rlhf.make_preferences(_rng(seed, "rlhf", "corpus-pref"), per_domain // 4):
        texts.append(f"{pair.messages[0].content}\n{pair.rejected}")
    return texts
