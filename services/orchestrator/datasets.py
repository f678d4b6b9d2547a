"""Task data of a cascade: train / validation prompts, SFT conversations, preference pairs.

A stage's data folder has `<domain>/{train,validation,sft}.jsonl` (and `rlhf/preferences.jsonl`);
`synthetic` means the synthetic domains, written once per seed under `<home>/data/` (atomically:
a temporary folder renamed into place, so concurrent workers never see half a dataset).
Loaded files are cached per process. This module knows nothing about Celery or the services.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
from pathlib import Path

from services.common.errors import InvalidArgument
from services.common.tasks import TaskRecord, load_tasks


def resolve_data_dir(data: str, home: Path, seed: int) -> Path:
    """The folder a stage's `data` names; `synthetic` is generated on first use."""
    if data != "synthetic":
        path = Path(data).expanduser()
        if not path.is_dir():
            raise InvalidArgument("data", f"{path} is not a folder of <domain>/{{train,validation,sft}}.jsonl")
        return path.resolve()
    from services.common.synth import DEFAULT_SIZES, write_dataset

    sizes = "-".join(str(n) for n in DEFAULT_SIZES.values())  # a home built with other sizes keeps its copy
    target = (Path(home) / "data" / f"synthetic-seed{seed}-{sizes}").resolve()
    if not target.exists():

        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".synth-"))
        write_dataset(tmp, seed=seed)
        try:
            os.rename(tmp, target)
        except OSError:  # another process won the race; its copy is identical (deterministic)
            shutil.rmtree(tmp, ignore_errors=True)
    return target


@functools.lru_cache(maxsize=64)
def _tasks(path: str, domain: str) -> tuple[TaskRecord, ...]:
    return tuple(load_tasks(Path(path), domain=domain))  # the folder names the domain of rows that name none


@functools.lru_cache(maxsize=64)
def _jsonl(path: str) -> tuple[dict, ...]:
    with open(path, encoding="utf-8") as f:
        return tuple(json.loads(line) for line in f if line.strip())


def _file(root: Path, domain: str, name: str) -> Path:
    path = root / domain / f"{name}.jsonl"
    if not path.exists():
        raise InvalidArgument("data", f"{path} is missing (domain {domain!r} has no {name} split)")
    return path


def tasks(root: Path, domains: list[str], split: str) -> list[TaskRecord]:
    """Task records of `split` (train / validation) for every domain, in domain order."""
    out: list[TaskRecord] = []
    for domain in domains:
        out.extend(_tasks(str(_file(root, domain, split)), domain))
    return out


def env_data_dir(data: str, home: Path, seed: int) -> Path:
    """The folder of an env stage's tasks, `<dir>/<env>/{train,validation}.jsonl`: the stage's data
    folder, or for `synthetic` the env tasks of the seed (services.common.synth.multiturn), written
    once under `<home>/data/` apart from the single-turn domains (both have a `workbench/`)."""
    if data != "synthetic":
        return resolve_data_dir(data, home, seed)
    from services.common.synth.multiturn import write_env_dataset

    target = (Path(home) / "data" / f"env-synthetic-seed{seed}").resolve()
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".env-synth-"))
        write_env_dataset(tmp, seed=seed)
        try:
            os.rename(tmp, target)
        except OSError:  # another process won the race; its copy is identical (deterministic)
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def env_tasks(root: Path, env: str, split: str) -> list[dict]:
    """Task records of environment `env` (as the env service reads them: OpenEpisode.task_json)."""
    return list(_jsonl(str(_file(root, env, split))))


def sft_examples(root: Path, domains: list[str]) -> list[dict]:
    """SFT conversations ({id, domain, messages}) of every domain."""
    out: list[dict] = []
    for domain in domains:
        out.extend(_jsonl(str(_file(root, domain, "sft"))))
    return out


def preference_pairs(root: Path, domains: list[str]) -> list[TaskRecord]:
    """Preference records (messages, chosen, rejected) of every domain."""
    out: list[TaskRecord] = []
    for domain in domains:
        out.extend(_tasks(str(_file(root, domain, "preferences")), domain))
    return out


SPLITS_NEEDED = {"sft": ("sft",), "grpo": ("train",), "mopd": ("train",), "rm": ("preferences",)}
"""Files each stage type reads per trained domain; policy stages also read `validation` of every evaluated domain."""


def missing_data(cascade) -> list[str]:
    """Every `<domain>/<split>.jsonl` a cascade's stages will read that its data folder lacks, one problem
    per line naming the stage, the domain and the file (`synthetic` has every domain: nothing to check).
    Checked at submit, so a run is refused instead of failing at its first step."""
    problems: list[str] = []
    for i, stage in enumerate(cascade.stages):
        data = stage.data or cascade.data
        if data == "synthetic":
            continue
        where = f"stages[{i}] ({stage.name})"
        root = Path(data).expanduser()
        if not root.is_dir():
            problems.append(f"{where}.data: {root} is not a folder of <domain>/{{train,validation,sft}}.jsonl")
            continue
        if getattr(stage, "env", None):  # an env stage trains on its environment's tasks
            needed = [(stage.env, "train")]
        else:
            needed = [(d, split) for d in stage.domains for split in SPLITS_NEEDED[stage.type]]
        if stage.type != "rm":
            needed += [(d, "validation") for d in stage.eval_domains()]
        for domain, split in dict.fromkeys(needed):
            if not (root / domain / f"{split}.jsonl").is_file():
                problems.append(f"{where}.domains: domain {domain!r} has no data in {root} "
                                f"({domain}/{split}.jsonl is missing)")
    return problems
