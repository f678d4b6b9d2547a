"""Everything a task needs to work on one run: its cascade, ledger, clients, data and artefacts.

Built from the run id (tasks pass IDs and re-fetch state) and cached per process, so a worker
that handles many steps of one run loads the config and tokenizer once. This module knows
nothing about Celery.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from pathlib import Path

from services.orchestrator import datasets
from services.orchestrator.artifacts import ArtifactStore
from services.orchestrator.cascade_config import CascadeConfig
from services.orchestrator.clients import ServiceClients
from services.orchestrator.config import OrchestratorSettings
from services.orchestrator.ledger import Ledger, ledger_at, step_id_for


@dataclass
class RunContext:
    run_id: int
    config: CascadeConfig
    settings: OrchestratorSettings
    ledger: Ledger
    clients: ServiceClients

    @property
    def run_dir(self) -> Path:
        return self.settings.home.expanduser().resolve() / "runs" / str(self.run_id)

    @functools.cached_property
    def artifacts(self) -> ArtifactStore:
        return ArtifactStore(self.run_dir / "steps")

    def stage(self, index: int):
        return self.config.stages[index]

    def step_id(self, stage: int, step: int) -> str:
        return step_id_for(self.run_id, stage, step)

    def data_dir(self, stage: int) -> Path:
        data = self.stage(stage).data or self.config.data
        return datasets.resolve_data_dir(data, self.settings.home.expanduser(), self.config.seed)

    @functools.cached_property
    def tokenizer(self):
        from services.common.modelio import load_tokenizer

        return load_tokenizer(self.config.model)

    def weights_uri(self, version: int | None) -> str:
        """Where weight `version` lives (version 0 / None = the cascade's initial model)."""
        if not version:
            return str(Path(self.config.model).expanduser().resolve())
        for v, uri, _sha in self.ledger.weight_versions(self.run_id):
            if v == version:
                return uri
        raise LookupError(f"run {self.run_id}: weight version {version} was never published")


_lock = threading.Lock()
_cache: dict[tuple[int, str], RunContext] = {}


def context_for(run_id: int, settings: OrchestratorSettings | None = None) -> RunContext:
    """The (process-cached) context of `run_id`, its cascade read back from the ledger."""
    settings = settings or OrchestratorSettings()
    key = (run_id, settings.ledger())
    with _lock:
        if key not in _cache:
            ledger = ledger_at(settings.ledger())
            config = CascadeConfig.model_validate(ledger.run(run_id).config)
            _cache[key] = RunContext(run_id, config, settings, ledger, ServiceClients(settings))
        return _cache[key]
