"""Several ranks behind one gRPC front door.

Rank 0 serves gRPC through a `Coordinator`: it answers local questions itself (state, replays
of applied step ids, streaming published files), validates every request before anything moves
(a bad request never reaches the other ranks), then broadcasts each collective command —
`(name, args)` with the decoded batch — to the other ranks and runs it itself. Ranks > 0 run
`follow`, executing commands in the order received until `stop`. With one rank nothing is
broadcast. Commands run one at a time (a lock), so ranks never interleave collectives.
This module knows nothing of gRPC, losses or files; it only orders calls on TrainerCore.
"""

from __future__ import annotations

import logging
import threading

import torch.distributed as dist

from services.trainer.core import Published, StepOptions, StepResult, TrainerCore, TrainerState

log = logging.getLogger(__name__)

AUTOSAVE_TAG = "autosave"
COMMANDS = frozenset({"apply_step", "save_checkpoint", "load_checkpoint", "publish_weights", "write_digest", "stop"})


def _broadcast(message: tuple | None) -> tuple:
    box = [message]
    dist.broadcast_object_list(box, src=0)
    return box[0]


class Coordinator:
    """Rank 0's entry point to the core; thread-safe, one command at a time."""

    def __init__(self, core: TrainerCore):
        if core.rank != 0:
            raise RuntimeError("Coordinator runs on rank 0; other ranks call follow()")
        self.core = core
        self._lock = threading.Lock()
        self._stopped = False
        self._published: tuple[int, Published] | None = None
        """(global step, version) of the last publish: weights that have not changed since are not
        written again as a new version (a caller retrying after a lost reply gets the same one)."""

    def _run(self, name: str, *args):
        if self.core.world > 1:
            _broadcast((name, args))
        return getattr(self.core, name)(*args)

    def train_step(
        self, step_id: str, loss: str, batch, params, cursor: str, lr: float | None = None, reset: bool = False,
        init: tuple[str, str] | None = None, options: StepOptions | None = None,
    ) -> StepResult:
        """Exactly once: a recorded step_id returns its metrics; otherwise validate, then apply on all ranks
        (after clearing the optimizer's state when `reset`, after loading `init` = (uri, sha256) when given)."""
        with self._lock:
            done = self.core.recorded(step_id)
            if done is not None:
                return done
            name, decoded, decoded_params = self.core.prepare(step_id, loss, batch, params, lr, options)
            directory = self.core.prepare_init(*init) if init else None
            result = self._run("apply_step", step_id, name, decoded, decoded_params, cursor, lr, reset, directory, options)
            if self.core.cfg.autosave:  # durable before the reply: a restart resumes with this step
                self._run("save_checkpoint", AUTOSAVE_TAG)
            return result

    def save_checkpoint(self, tag: str) -> tuple:
        with self._lock:
            tag = self.core.resolve_save_tag(tag)
            self.core.store.checkpoint_dir(tag)  # validates the tag before any rank moves
            return self._run("save_checkpoint", tag)

    def resume(self, tag: str) -> TrainerState | None:
        """Start-up resume: `auto` loads the newest checkpoint when there is one, else nothing."""
        if tag == "auto":
            if not (self.core.store.checkpoints / "latest").exists():
                return None
            tag = "latest"
        return self.load_checkpoint(tag)

    def load_checkpoint(self, tag: str) -> TrainerState:
        with self._lock:
            self._published = None
            return self._run("load_checkpoint", self.core.resolve_load_tag(tag))

    def publish_weights(self) -> Published:
        """The current weights as a version: a new one, or the last one when no step was applied since."""
        with self._lock:
            step = self.core.engine.global_step
            if self._published is not None and self._published[0] == step:
                return self._published[1]
            published = self._run("publish_weights")
            self._published = (step, published)
            return published

    def state(self) -> TrainerState:
        with self._lock:
            return self.core.state()

    def chunks(self, version: int, chunk_bytes: int, from_path: str = "", from_offset: int = 0):
        return self.core.chunks(version, chunk_bytes, from_path, from_offset)

    def shutdown(self) -> str:
        """Every rank writes its parameter digest, then the followers leave their loop."""
        with self._lock:
            if self._stopped:
                return ""
            self._stopped = True
            digest = self._run("write_digest")
            if self.core.world > 1:
                _broadcast(("stop", ()))
            return digest


def follow(core: TrainerCore) -> None:
    """Ranks > 0: execute rank 0's commands in order until `stop`."""
    while True:
        name, args = _broadcast(None)
        if name not in COMMANDS:
            raise RuntimeError(f"rank {core.rank}: unknown command {name!r} from rank 0")
        if name == "stop":
            log.info("follower stopping", extra={"rank": core.rank})
            return
        getattr(core, name)(*args)
