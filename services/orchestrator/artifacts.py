"""Per-step artefacts (drawn prompts, rollouts, scores) passed between Celery tasks by step id.

Tasks pass IDs, not payloads: each phase writes what the next one needs under
`<home>/runs/<run>/steps/<step_id>/<name>.json`, atomically (temp file + rename), so a redelivered
task either finds a complete artefact or none. Token arrays are stored as lists (a step holds a few
thousand tokens per sample at most). In a distributed deployment `home` is a shared volume.
This module knows nothing about what the artefacts mean.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any


class ArtifactStore:
    def __init__(self, root: Path):
        self.root = Path(root)

    def _dir(self, step_id: str) -> Path:
        return self.root / step_id.replace("/", "_")

    def path(self, step_id: str, name: str) -> Path:
        return self._dir(step_id) / f"{name}.json"

    def has(self, step_id: str, name: str) -> bool:
        return self.path(step_id, name).exists()

    def put(self, step_id: str, name: str, value: Any) -> Path:
        """Write `value` as JSON atomically; an existing artefact is replaced."""
        target = self.path(step_id, name)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{name}.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(value, f, separators=(",", ":"))
        os.replace(tmp, target)
        return target

    def get(self, step_id: str, name: str) -> Any:
        path = self.path(step_id, name)
        if not path.exists():
            raise FileNotFoundError(f"step {step_id}: artefact {name!r} is missing ({path})")
        return json.loads(path.read_text())

    def drop(self, step_id: str) -> None:
        """Remove a finished step's artefacts (kept by default for inspection)."""
        shutil.rmtree(self._dir(step_id), ignore_errors=True)
