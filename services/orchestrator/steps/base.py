"""What every kind of step shares: the ledger phases, training, publishing and weight sync.

A step kind (sft, grpo, mopd, rm) is a class with `chain`: the ordered (queue, method) pairs the
Celery chain runs. Every method takes (ctx, stage, step), is idempotent (it returns at once when
the ledger says its phase was reached) and records its phase with the seconds it took. This module
knows the services' contracts and the ledger, not Celery.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import numpy as np

from services.common import codec
from services.common.pb import policy_pb2, trainer_pb2
from services.orchestrator import rollout
from services.orchestrator.context import RunContext

log = logging.getLogger(__name__)


class StepKind:
    """Base of the step kinds. Subclasses set `chain` and implement the methods it names."""

    chain: Sequence[tuple[str, str]] = ()
    trainer_attr = "trainer"
    publishes_every_step = True
    """False: publish only where the weights are read — the stage's last step and a step an
    evaluation follows (SFT: the policy does not sample while it trains, so 300 steps need not
    write 300 weight versions)."""
    publishes_policy = True
    """False when the trainer's weights are not the policy's (a reward model): no weight version on the step."""

    def begin(self, ctx: RunContext, stage: int, step: int):
        return ctx.ledger.begin_step(ctx.run_id, stage, step)

    def trainer(self, ctx: RunContext):
        return getattr(ctx.clients, self.trainer_attr)

    # ----------------------------------------------------------------- train, publish, sync
    def train_request(self, ctx: RunContext, stage: int, step: int) -> tuple[trainer_pb2.TrainStepRequest | None, dict]:
        """(the TrainStep request of this step or None when nothing is left to learn from, metrics
        of how the batch was built)."""
        raise NotImplementedError

    def train(self, ctx: RunContext, stage: int, step: int) -> None:
        """TrainStep (exactly once: the trainer refuses a step id it applied) then PublishWeights."""
        sid = ctx.step_id(stage, step)
        record = ctx.ledger.step(sid)
        if not record.reached("trained"):
            start = time.perf_counter()
            request, built = self.train_request(ctx, stage, step)
            metrics: dict[str, float] = dict(built)
            if request is None:
                metrics["train/skipped"] = 1.0
            else:
                cfg = ctx.stage(stage)
                request.step_id = sid
                request.learning_rate = cfg.optimizer.lr_at(step, cfg.steps)
                request.reset_optimizer = step == 0 and cfg.optimizer.reset
                reply = self.trainer(ctx).call("TrainStep", request)
                metrics.update({f"train/{k}": float(v) for k, v in reply.metrics.items()})
                metrics["train/replayed"] = float(reply.replayed)
            ctx.ledger.advance(sid, "trained", metrics=metrics, seconds=time.perf_counter() - start)
        if self.publishes_after(ctx.stage(stage), step):
            self.publish(ctx, stage, step)

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

    def update(self, ctx: RunContext, stage: int, step: int) -> None:
        """Train, publish and sync as one task: the policy loads the new weights the moment they
        exist, one queue hop sooner than a separate sync task (each part stays idempotent)."""
        self.train(ctx, stage, step)
        self.sync(ctx, stage, step)

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


def run_weight_version(ctx: RunContext) -> int:
    """The run's latest published weight version (0 = the cascade's initial model)."""
    return max((v for v, _u, _s in ctx.ledger.weight_versions(ctx.run_id)), default=0)


def weights_ref(ctx: RunContext, version: int) -> tuple[str, str]:
    """(uri, sha256) of the run's weight `version` (0 = the initial model, hashed here)."""
    uri = ctx.weights_uri(version)
    if version:
        return uri, next(s for v, _u, s in ctx.ledger.weight_versions(ctx.run_id) if v == version)
    from services.common.checksum import sha256_dir

    return uri, sha256_dir(uri)


def load_policy_weights(ctx: RunContext, version: int) -> None:
    """The policy loads the run's weight `version` (0 = the initial model), checksum verified there."""
    uri, sha = weights_ref(ctx, version)
    ctx.clients.policy.call("LoadWeights", policy_pb2.LoadWeightsRequest(
        weights={"version": version, "uri": uri, "sha256": sha}))


def generate_current(ctx: RunContext, records, n: int, sampling, seed: int | None) -> dict:
    """rollout.generate on the run's current weights. A policy serving another version (restarted
    with its initial weights, or last used by another run) loads the current one and the batch is
    sampled again, so a restart never silently samples from the wrong weights."""
    return generate_at(ctx, run_weight_version(ctx), records, n, sampling, seed)


def generate_at(ctx: RunContext, version: int, records, n: int, sampling, seed: int | None, attempts: int = 3) -> dict:
    """rollout.generate on the run's weight `version`, loading it first when the policy serves another."""
    for _ in range(attempts):
        out = rollout.generate(ctx.clients.policy, records, n, sampling, seed)
        if out["weight_version"] == version:
            return out
        log.warning("policy serves another weight version; reloading",
                    extra={"run_id": ctx.run_id, "served": out["weight_version"], "expected": version})
        load_policy_weights(ctx, version)
    raise RuntimeError(f"the policy does not keep weight version {version} (served {out['weight_version']})")


def batch_message(rows: Sequence[Sequence[int]], masks: Sequence[Sequence[int]], **float_rows) -> trainer_pb2.TrainBatch:
    """A TrainBatch of int rows + masks and any per-token float rows given by proto field name."""
    batch = trainer_pb2.TrainBatch(input_ids=codec.encode(rows, "int32"), loss_mask=codec.encode(masks, "int32"))
    for name, value in float_rows.items():
        if value is not None:
            getattr(batch, name).CopyFrom(codec.encode(value, "float32"))
    return batch


def prompt_completion_rows(prompt_ids, token_ids, logprobs, keep: np.ndarray, n: int):
    """Rows prompt+completion of the kept samples, their loss masks and per-token inference log-probs
    (0 on prompt tokens). `keep` is a flat bool per sample; sample s continues prompt s // n."""
    rows, masks, inf = [], [], []
    for s in np.flatnonzero(keep):
        p, c = prompt_ids[s // n], token_ids[s]
        rows.append(list(p) + list(c))
        masks.append([0] * len(p) + [1] * len(c))
        inf.append([0.0] * len(p) + list(logprobs[s]))
    return rows, masks, inf
