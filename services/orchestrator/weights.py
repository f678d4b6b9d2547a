"""The run's weight versions: which one is current, where each lives, and the policy serving one.

Version 0 is the cascade's initial model; every PublishWeights of a policy stage records the next
one in the ledger (uri and sha256). Sampling goes through `generate_at`, which checks the version
the policy reports and loads the expected one when it serves another (a restarted policy, or one
last used by another run), so no batch is ever sampled from the wrong weights. This module knows
the ledger and the policy's contract, not stages or Celery.
"""

from __future__ import annotations

import logging

from services.common.pb import policy_pb2
from services.orchestrator import rollout
from services.orchestrator.context import RunContext

log = logging.getLogger(__name__)


def current_version(ctx: RunContext) -> int:
    """The run's latest published policy weight version (0 = the cascade's initial model)."""
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


def generate_current(ctx: RunContext, records, n: int, sampling, seed: int | None, prompt_ids=None) -> dict:
    """rollout.generate on the run's current weights (see generate_at)."""
    return generate_at(ctx, current_version(ctx), records, n, sampling, seed, prompt_ids=prompt_ids)


def generate_at(ctx: RunContext, version: int, records, n: int, sampling, seed: int | None, attempts: int = 3,
                prompt_ids=None) -> dict:
    """rollout.generate on the run's weight `version`: a policy serving another version loads this
    one and the batch is sampled again, so a restart never silently samples from the wrong weights.
    `prompt_ids`: the records' prompts already rendered (rollout.render_prompt)."""
    for _ in range(attempts):
        out = rollout.generate(ctx.clients.policy, records, n, sampling, seed, prompt_ids=prompt_ids)
        if out["weight_version"] == version:
            return out
        log.warning("policy serves another weight version; reloading",
                    extra={"run_id": ctx.run_id, "served": out["weight_version"], "expected": version})
        load_policy_weights(ctx, version)
    raise RuntimeError(f"the policy does not keep weight version {version} (served {out['weight_version']})")
