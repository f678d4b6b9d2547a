"""Synthetic multi-turn tasks, one generator per environment of the env service (workbench, swe, python).

Each module has `make_tasks(rng, n, split) -> list[dict]`: task records in that environment's own
shape (what `OpenEpisode.task_json` carries), small enough that the tiny model can learn them in a
few turns. `write_env_dataset` writes `<out>/<env>/{train,validation}.jsonl`, identical for a seed.
This package knows nothing about the env service's code (it only writes records).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from services.common.errors import InvalidArgument
from services.common.synth.multiturn import python, swe, workbench

REGISTRY = {"workbench": workbench, "swe": swe, "python": python}
ENVIRONMENT_NAMES: tuple[str, ...] = tuple(sorted(REGISTRY))
"""The environments the env service runs (a stage's `env:`); tests/env checks it against its registry."""


def write_env_dataset(out: Path, seed: int = 0, n_train: int = 64, n_val: int = 16,
                      envs: list[str] | None = None) -> dict[str, Path]:
    """Write each environment's (`envs`; None = every one) train / validation tasks under `out`;
    returns env -> folder."""
    unknown = [e for e in envs or [] if e not in REGISTRY]
    if unknown:
        raise InvalidArgument("envs", f"unknown environment(s) {unknown}; choose from {list(ENVIRONMENT_NAMES)}")
    written = {}
    for name, module in REGISTRY.items():
        if envs is not None and name not in envs:
            continue
        folder = Path(out) / name
        folder.mkdir(parents=True, exist_ok=True)
        for split, n in (("train", n_train), ("validation", n_val)):
            rng = random.Random(f"cascade-env-synth:{seed}:{name}:{split}")
            with open(folder / f"{split}.jsonl", "w") as f:
                for record in module.make_tasks(rng, n, split):
                    f.write(json.dumps(record, sort_keys=True) + "\n")
        written[name] = folder
    return written
