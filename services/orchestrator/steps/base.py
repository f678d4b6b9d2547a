"""What every step kind shares: its phases as declared objects, and training, publishing, weight sync.

A step kind (sft, grpo, mopd, rm) declares `phases`: the `Phase` objects (name, queue, function) in
the order they run. services.orchestrator.tasks builds a step's Celery chain from that declaration,
one link per phase on the phase's queue. Every phase function takes (ctx, stage, step), is
idempotent (it returns at once when the ledger or the step's artefacts say its work was done) and
records its ledger phase with the seconds it took. What a step draws and tokenises before calling
a service is its kind's `prepare`; the next step's is made on a thread while this one trains
(`prefetch_next`, services.orchestrator.overlap), the same batch either way. A kind's hooks run at
the stage's edges: `start_stage` brings up what its steps need, `after_evaluation` adds the kind's
own measurements.
The last phase of every kind is `update` (train, publish, sync, below). This module knows the
services' contracts and the ledger, not Celery.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from services.common import codec
from services.common.pb import trainer_pb2
from services.orchestrator.context import RunContext
from services.orchestrator.overlap import PREFETCH
from services.orchestrator.weights import load_policy_weights

if TYPE_CHECKING:
    from services.orchestrator.evals import Scoring


@dataclass(frozen=True)
class Phase:
    """One link of a step's chain."""

    name: str
    """Label of the phase: the phase task's argument and its worker-metrics label."""
    queue: str
    """Queue whose workers run it (services.orchestrator.celery_app.queue_names)."""
    run: Callable[[RunContext, int, int], None]
    """The work: (ctx, stage index, step index) -> None, idempotent."""


class StepKind:
    """Base of the step kinds. Subclasses declare `phases` and `train_request`."""

    publishes_every_step = True
    """False: publish only where the weights are read — the stage's last step and a step an
    evaluation follows (SFT: the policy does not sample while it trains, so 300 steps need not
    write 300 weight versions)."""
    publishes_policy = True
    """False when the trainer's weights are not the policy's (a reward model): no weight version on the step."""
    evaluates = True
    """False when the stage does not change the policy (rm): nothing to evaluate."""

    @property
    def phases(self) -> tuple[Phase, ...]:
        """The step's phases in the order they run."""
        raise NotImplementedError

    def phase(self, name: str) -> Phase:
        """The declared phase called `name`."""
        for p in self.phases:
            if p.name == name:
                return p
        raise KeyError(f"{type(self).__name__} has no phase {name!r} (its phases: {[p.name for p in self.phases]})")

    # ----------------------------------------------------------------- hooks at the stage's edges
    def start_stage(self, ctx: RunContext, stage: int) -> None:
        """Bring up what this stage's steps need (teachers, a reference, a reward model) before its first step."""

    def after_evaluation(self, ctx: RunContext, stage: int, step: int, version: int, scoring: Scoring) -> None:
        """Measurements of this kind that follow an evaluation of `stage` at `step` (weights `version`),
        their samples scored through `scoring` (evals.Scoring: behind the policy's next generation)."""

    # ----------------------------------------------------------------- the batch, prepared ahead
    def prepare(self, ctx: RunContext, stage: int, step: int):
        """What the step draws and tokenises before it calls any service (None: nothing). A pure
        function of the run's data, seed, stage and step, so it may be made ahead (`prefetch_next`)."""
        return None

    def prepared(self, ctx: RunContext, stage: int, step: int):
        """`prepare` of this step: the one made ahead while the previous step trained, else made now."""
        return PREFETCH.take(_prefetch_key(ctx, stage, step), lambda: self.prepare(ctx, stage, step))

    def prefetch_next(self, ctx: RunContext, stage: int, step: int) -> None:
        """Start `prepare` of the stage's next step on a thread (overlap on): called as this step's
        TrainStep is sent, so the next batch is drawn and tokenised while this one trains."""
        if ctx.settings.overlap and step + 1 < ctx.stage(stage).steps:
            PREFETCH.start(_prefetch_key(ctx, stage, step + 1), lambda: self.prepare(ctx, stage, step + 1))

    # ----------------------------------------------------------------- train, publish, sync
    def trainer(self, ctx: RunContext):
        """The trainer service this kind's steps train on."""
        return ctx.clients.trainer

    def train_request(self, ctx: RunContext, stage: int, step: int) -> tuple[trainer_pb2.TrainStepRequest | None, dict]:
        """(the TrainStep request of this step or None when nothing is left to learn from, metrics
        of how the batch was built)."""
        raise NotImplementedError

    def update(self, ctx: RunContext, stage: int, step: int) -> None:
        """Train, publish and sync as one task: the policy loads the new weights the moment they
        exist, one queue hop sooner than a separate sync task (each part stays idempotent)."""
        self.train(ctx, stage, step)
        self.sync(ctx, stage, step)

    def train(self, ctx: RunContext, stage: int, step: int) -> None:
        """TrainStep (exactly once: the trainer refuses a step id it applied) then PublishWeights.
        Every request carries the stage optimizer's rate at this step, weight decay and clipping."""
        sid = ctx.step_id(stage, step)
        record = ctx.ledger.step(sid)
        if not record.reached("trained"):
            start = time.perf_counter()
            request, built = self.train_request(ctx, stage, step)
            metrics: dict[str, float] = dict(built)
            if request is None:
                metrics["train/skipped"] = 1.0
            else:
                opt = ctx.stage(stage).optimizer
                request.step_id = sid
                request.learning_rate = opt.lr_at(step, ctx.stage(stage).steps)
                request.weight_decay = opt.weight_decay
                request.grad_clip = opt.grad_clip
                request.reset_optimizer = step == 0 and opt.reset
                self.prefetch_next(ctx, stage, step)
                reply = self.trainer(ctx).call("TrainStep", request)
                metrics.update({f"train/{k}": float(v) for k, v in reply.metrics.items()})
                metrics["train/replayed"] = float(reply.replayed)
            metrics.update(self.train_metrics(ctx, stage, step))
            ctx.ledger.advance(sid, "trained", metrics=metrics, seconds=time.perf_counter() - start)
        if self.publishes_after(ctx.stage(stage), step):
            self.publish(ctx, stage, step)

    def train_metrics(self, ctx: RunContext, stage: int, step: int) -> dict[str, float]:
        """Metrics of the step recorded at `trained` besides the batch's and the trainer's (none here)."""
        return {}

    def publishes_after(self, cfg, step: int) -> bool:
        return self.publishes_every_step or step == cfg.steps - 1 or cfg.eval_due(step)

    def publish(self, ctx: RunContext, stage: int, step: int) -> None:
        sid = ctx.step_id(stage, step)
        if ctx.ledger.step(sid).reached("published"):
            return
        start = time.perf_counter()
        ref = self.trainer(ctx).call("PublishWeights", trainer_pb2.PublishWeightsRequest())
        self.record_published(ctx, stage, ref)
        version = int(ref.version) if self.publishes_policy else None
        ctx.ledger.advance(sid, "published", weight_version=version, seconds=time.perf_counter() - start)

    def record_published(self, ctx: RunContext, stage: int, ref) -> None:
        ctx.ledger.record_weight_version(ctx.run_id, int(ref.version), ref.uri, ref.sha256)

    def sync(self, ctx: RunContext, stage: int, step: int) -> None:
        """The policy loads the published weights (checksum verified there) and the step is done."""
        sid = ctx.step_id(stage, step)
        record = ctx.ledger.step(sid)
        if not record.reached("synced"):
            start = time.perf_counter()
            if record.weight_version:
                load_policy_weights(ctx, record.weight_version)
            ctx.ledger.advance(sid, "synced", seconds=time.perf_counter() - start)
        ctx.ledger.advance(sid, "done")


def _prefetch_key(ctx: RunContext, stage: int, step: int) -> tuple:
    return (ctx.settings.ledger(), ctx.run_id, stage, step)


def batch_message(rows: Sequence[Sequence[int]], masks: Sequence[Sequence[int]], **float_rows) -> trainer_pb2.TrainBatch:
    """A TrainBatch of int rows + masks and any per-token float rows given by proto field name."""
    batch = trainer_pb2.TrainBatch(input_ids=codec.encode(rows, "int32"), loss_mask=codec.encode(masks, "int32"))
    for name, value in float_rows.items():
        if value is not None:
            getattr(batch, name).CopyFrom(codec.encode(value, "float32"))
    return batch


def sample_row(values: np.ndarray):
    """One float32 row of per-sample values (TrainBatch.advantages)."""
    return codec.encode([np.asarray(values, dtype=np.float32)], "float32")
