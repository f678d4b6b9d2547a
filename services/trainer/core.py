"""TrainerCore: the trainer's one core object (no gRPC here).

Every rank holds one. Methods fall in two groups:
- local, rank 0 only, no collectives: `recorded` (exactly-once lookup), `prepare` and `prepare_init`
  (decode and validate a request; nothing is applied when they raise), `resolve_*`, `state`, `chunks`;
- collective, run on every rank in the same order (see distributed.py): `apply_step`,
  `save_checkpoint`, `load_checkpoint`, `publish_weights`, `write_digest`.
Files (journal, published weights, the `latest` marker) are written by rank 0 only.
"""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

from services.common.checksum import read_weights
from services.common.cores import CorePool, host_ranks
from services.common.errors import InvalidArgument
from services.common.modelio import load_tokenizer, resolve_uri, safetensors_views
from services.common.pb import trainer_pb2
from services.trainer.batch import Batch, decode_batch, decode_params, lookup_loss
from services.trainer.config import TrainerConfig
from services.trainer.engine import SHARING_ATTENTION, Engine, can_share
from services.trainer.export import can_stream, export_tensors, render_side_files, write_version
from services.trainer.losses import LOSSES, LossParams, count_units
from services.trainer.packing import pack
from services.trainer.store import Chunk, Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepResult:
    metrics: dict[str, float]
    global_step: int
    replayed: bool = False


def read_init_tensors(directory: Path, sha256: str = "") -> dict[str, torch.Tensor]:
    """Name -> tensor of every `.safetensors` file in `directory` (checksum verified when `sha256` is
    given: ChecksumMismatch, and nothing returned, when the bytes differ)."""
    read = read_weights(directory, lambda rel: rel.endswith(".safetensors"))
    if sha256:
        read.check(sha256)
    tensors: dict[str, torch.Tensor] = {}
    for rel, buffer in sorted(read.files.items()):
        tensors |= safetensors_views(buffer, rel, field="init.uri")
    if not tensors:
        raise InvalidArgument("init.uri", f"{directory} holds no .safetensors weights")
    return tensors


SHARING_LOSSES = ("grpo", "mopd")
"""Losses whose steps may share prompts: they train several sampled completions of each prompt."""


@dataclass(frozen=True)
class StepOptions:
    """Per-step optimizer settings of a TrainStep (None = the trainer's configured value)."""

    weight_decay: float | None = None
    """AdamW weight decay of this step, >= 0."""
    grad_clip: float | None = None
    """Global gradient-norm clip of this step, >= 0 (0 = none)."""
    packing: bool = False
    """SFT: pack the step's conversations into rows (services/trainer/packing.py)."""
    share_prompts: bool = False
    """GRPO, MOPD: lay a prompt's completions after one copy of it (services/trainer/sharing.py)."""

    def check(self, loss: str) -> None:
        for name in ("weight_decay", "grad_clip"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v >= 0):
                raise InvalidArgument(name, f"is {v}; must be a finite number >= 0 (or unset for the trainer's {name})")
        if self.packing and loss != "sft":
            raise InvalidArgument("packing", f"is set for loss {loss!r}; only sft packs (the other losses normalise per sequence or pair)")
        if self.share_prompts and loss not in SHARING_LOSSES:
            raise InvalidArgument("share_prompts", f"is set for loss {loss!r}; only {' and '.join(SHARING_LOSSES)} "
                                  "share prompts (their batches hold several completions of each prompt)")


@dataclass(frozen=True)
class TrainerState:
    global_step: int
    weight_version: int
    data_cursor: str
    applied_step_ids: list[str]
    learning_rate: float
    model: str
    world_size: int


@dataclass(frozen=True)
class Published:
    version: int
    uri: str
    sha256: str
    seconds: float = field(default=0.0, compare=False)


class TrainerCore:
    def __init__(self, cfg: TrainerConfig, engine: Engine | None = None):
        self.cfg = cfg
        self.engine = engine or Engine(cfg)
        self.rank, self.world = self.engine.rank, self.engine.world
        self.store = Store(cfg.store)
        self.applied: OrderedDict[str, dict] = self.store.read_journal(cfg.journal_keep) if self.rank == 0 else OrderedDict()
        self.data_cursor = ""
        self.tokenizer = load_tokenizer(resolve_uri(cfg.model, "model")) if self.rank == 0 else None
        self._side_files: dict[str, bytes] | None = None
        self._staged_init: tuple[str, dict[str, torch.Tensor]] | None = None
        self.cores = CorePool.from_settings(cfg, *host_ranks(self.rank, self.world))  # ranks of one host: disjoint cores

    # -- local (rank 0) ----------------------------------------------------------------------
    def recorded(self, step_id: str) -> StepResult | None:
        """The recorded result when `step_id` was already applied, else None."""
        rec = self.applied.get(step_id)
        return None if rec is None else StepResult(dict(rec["metrics"]), int(rec["global_step"]), replayed=True)

    def prepare(
        self, step_id: str, loss: str, batch: trainer_pb2.TrainBatch, params: trainer_pb2.LossParams, lr: float | None = None,
        options: StepOptions | None = None,
    ):
        """Validate a TrainStep request; return (loss name, Batch, LossParams) for `apply_step`."""
        if not step_id.strip():
            raise InvalidArgument("step_id", "is empty; give a unique id per (run, stage, step)")
        if lr is not None and not (math.isfinite(lr) and lr >= 0):
            raise InvalidArgument("learning_rate", f"is {lr}; must be a finite number >= 0 (or unset for the trainer's schedule)")
        spec = lookup_loss(loss)
        if spec.model_kind != self.cfg.model_kind:
            raise InvalidArgument("loss", f"{loss!r} trains a {spec.model_kind} but this trainer's model_kind is {self.cfg.model_kind}")
        options = options or StepOptions()
        options.check(loss)
        if options.share_prompts and not can_share(self.engine.module):
            raise InvalidArgument("share_prompts", f"needs attention that takes a block mask ({' or '.join(SHARING_ATTENTION)}); "
                                  f"this model runs {self.engine.module.config._attn_implementation!r}: send share_prompts false")
        decoded_params = decode_params(params, spec)
        e = self.engine
        return loss, decode_batch(batch, spec, decoded_params, e.vocab_size, e.max_length, e.pad_id), decoded_params

    def prepare_init(self, uri: str, sha256: str) -> str:
        """Validate a step's `init` weights: read (and verify) them, check that they share parameters
        with this model at the same shapes; stage them for `apply_step` and return their directory."""
        directory = resolve_uri(uri, "init.uri")
        tensors = read_init_tensors(directory, sha256)
        shapes = self.engine.parameter_shapes()
        common = [n for n in tensors if n in shapes]
        if not common:
            raise InvalidArgument("init.uri", f"{directory} shares no parameter name with this trainer's "
                                  f"{self.cfg.model_kind} model ({self.cfg.model}); is it the same architecture?")
        for name in common:
            if tuple(tensors[name].shape) != shapes[name]:
                raise InvalidArgument("init.uri", f"{directory}: {name} has shape {tuple(tensors[name].shape)}, "
                                      f"this model's has {shapes[name]}; a model of another size")
        self._staged_init = (str(directory), tensors)
        return str(directory)

    def resolve_save_tag(self, tag: str) -> str:
        return tag or f"step-{self.engine.global_step}"

    def resolve_load_tag(self, tag: str) -> str:
        return self.store.resolve_checkpoint(tag)

    def state(self) -> TrainerState:
        return TrainerState(
            global_step=self.engine.global_step, weight_version=self.store.latest_version(),
            data_cursor=self.data_cursor, applied_step_ids=list(self.applied)[-1000:],
            learning_rate=self.engine.lr, model=self.cfg.model, world_size=self.world,
        )

    def chunks(self, version: int, chunk_bytes: int, from_path: str = "",
               from_offset: int = 0) -> tuple[int, Iterator[Chunk]]:
        return self.store.chunks(version, chunk_bytes, from_path, from_offset)

    # -- collective ----------------------------------------------------------------------------
    def apply_step(
        self, step_id: str, loss: str, batch: Batch, params: LossParams, cursor: str, lr: float | None = None,
        reset: bool = False, init: str | None = None, options: StepOptions | None = None,
    ) -> StepResult:
        """One optimizer step on this rank's shard of `batch` (at `lr` when given, from a fresh optimizer
        state when `reset`, from the weights in directory `init` when given); record it as applied."""
        spec = LOSSES[loss]
        loaded = None
        if init:
            staged = self._staged_init if self._staged_init and self._staged_init[0] == init else None
            tensors = staged[1] if staged else read_init_tensors(Path(init))  # rank 0 verified these files
            self._staged_init = None
            loaded = self.engine.load_weights(tensors, self.cfg.seed)
            log.info("weights loaded", extra={"init": init, "copied": loaded[0], "fresh": loaded[1]})
        if reset or init:
            self.engine.reset_optimizer()
        denominator = count_units(spec.unit, batch.loss_mask, batch.pairs)
        shard = batch.shard(self.rank, self.world, by_pairs=spec.unit == "pairs")
        options = options or StepOptions()
        if options.packing:
            shard = pack(shard, self.cfg.pack_tokens, self.engine.pad_id)
        with self.cores.lease():  # this rank's cores of the host's pool for this step (services/common/cores.py)
            metrics = self.engine.train_step(spec, shard, params, denominator, lr, options.weight_decay, options.grad_clip,
                                             options.share_prompts)
        if reset or init:
            metrics["optimizer_reset"] = 1.0
        if loaded is not None:
            metrics["init_copied"], metrics["init_fresh"] = float(loaded[0]), float(loaded[1])
        record = {"global_step": self.engine.global_step, "metrics": metrics}
        self.applied[step_id] = record
        while len(self.applied) > self.cfg.journal_keep:
            self.applied.popitem(last=False)
        self.data_cursor = cursor
        if self.rank == 0:
            self.store.append_journal(step_id, record)
        return StepResult(metrics, self.engine.global_step)

    def save_checkpoint(self, tag: str) -> tuple[str, Path, int]:
        """Model, optimizer, scheduler, step, data cursor, RNG state and where the journal of applied
        steps stands (a mark into it, not a copy: Store.journal_mark) -> checkpoints/<tag>."""
        journal = self.store.journal_mark() if self.rank == 0 else None
        client = {"data_cursor": self.data_cursor, "journal": journal, "rng": torch.get_rng_state()}
        self.engine.save(self.store.checkpoints, self.store.temp_tag(tag), client)
        if self.world > 1:
            dist.barrier()
        if self.rank == 0:
            self.store.commit_checkpoint(tag)
        if self.world > 1:
            dist.barrier()
        return tag, self.store.checkpoint_dir(tag), self.engine.global_step

    def load_checkpoint(self, tag: str) -> TrainerState:
        """Restore checkpoints/<tag> exactly; the journal becomes the checkpoint's applied set."""
        client = self.engine.load(self.store.checkpoints, tag)
        self.data_cursor = client.get("data_cursor", "")
        if "rng" in client:
            torch.set_rng_state(client["rng"])
        if self.rank == 0:
            if client.get("journal"):
                self.applied = self.store.journal_at(client["journal"], self.cfg.journal_keep)
            else:  # a checkpoint written before journal marks holds the applied set itself
                self.applied = OrderedDict(client.get("applied", []))
            self.store.rewrite_journal(self.applied)
        return self.state()

    def publish_weights(self) -> Published | None:
        """Write the current weights (HF layout, safetensors) as the next version; rank 0 returns it."""
        start = time.perf_counter()
        if self.rank != 0:
            self.engine.export(None)
            return None

        def write(directory: Path) -> str | None:
            return self.engine.export(lambda module: self._write_version(module, directory))

        version, path, digest = self.store.publish(write)
        return Published(version, str(path), digest, time.perf_counter() - start)

    def _write_version(self, module, directory: Path) -> str | None:
        """Write `module` and the tokenizer as an HF directory; return its sha256, hashed while written
        (None when save_pretrained had to write it: the store then hashes the directory)."""
        if not can_stream(module):
            module.save_pretrained(directory)
            self.tokenizer.save_pretrained(directory)
            return None
        if self._side_files is None:  # configs and tokenizer do not change while training: render them once
            self._side_files = render_side_files(module, self.tokenizer)
        return write_version(directory, self._side_files, export_tensors(module))

    def write_digest(self) -> str:
        """Write this rank's parameter digest to <store>/ranks/rank-<r>.sha256 (a sync check)."""
        digest = self.engine.param_digest()
        out = self.store.root / "ranks"
        out.mkdir(exist_ok=True)
        (out / f"rank-{self.rank}.sha256").write_text(digest + "\n")
        return digest
