"""The multi-turn rollout loop: G episodes per task on the env service, every live turn in one Generate.

`run_episodes` opens `n` episodes per task (OpenEpisode, the stage's turn limit), then loops: every
episode whose observation is back is in the next batched Policy.Generate (its prompt = the token ids
of its trajectory so far, services.common.trajectory: the chat template over its messages with the
generation prompt); each sampled turn goes to Env.Step on a thread pool, and the loop generates again
as soon as at least one observation is back — no episode waits for a slow sibling's tool call
(`overlap=False` waits for every call of the batch: the baseline bench/multiturn_bench.py compares).
Limits end an episode with a verdict naming the limit: `limit_turns` (max_turns, also enforced by the
service), `limit_tokens` (the whole sequence reached max_episode_tokens; a turn samples at most what
is left), `limit_env_seconds` (its tool calls' seconds, summed over turns). The reward is the env's at
the end (CloseEpisode scores an episode ended here as it stands). A failing env call ends the episode
with verdict `error` (masked out of the loss like a verifier error); the step goes on.

An episode whose env service lost it (`env_lost`: UNAVAILABLE once the client's own retries are spent,
or NOT_FOUND for an id the service never saw — a restarted service has an empty table) is retried,
up to `EnvRetry.retries` times with exponential backoff, before it is masked. A retry opens a fresh
episode and *replays* the policy's turns already taken: each recorded assistant text is stepped again
and the observation must come back exactly as the policy saw it. Then the trajectory (tokens, log π_inf,
weight version) is the one π drew, conditioned on observations the fresh env state reproduces, so the
sample and its reward stay on-policy and no generation is spent twice; replaying keeps the very
sample drawn, so the step's episodes are not biased towards those that missed the crash. When the
fresh episode answers differently (a tool whose output is not reproducible), the old turns were
conditioned on an observation the new state does not match and scoring it would reward a trajectory
the env never had: the episode *restarts from scratch* (a fresh OpenEpisode, fresh turns from the
current policy). Per episode "env_retries", "env_replays", "env_restarts" count them.
The sample is the whole trajectory: env tokens out of the loss mask, π_inf on policy tokens only.
This module knows the policy's and the env's contracts, not the stage kinds, the ledger or Celery.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import grpc
import numpy as np

from services.common import codec
from services.common.chat_template import IM_END
from services.common.errors import NotFound, Unavailable
from services.common.pb import env_pb2, policy_pb2
from services.common.trajectory import Trajectory
from services.orchestrator.rollout import sampling_params

log = logging.getLogger(__name__)
LIMIT_VERDICTS = ("limit_turns", "limit_tokens", "limit_env_seconds", "limit_deadline")
"""Verdicts of an episode ended by a limit (limit_deadline: the service's own wall-clock deadline)."""


@dataclass(frozen=True)
class EpisodeLimits:
    max_turns: int
    max_episode_tokens: int
    env_seconds: float


@dataclass
class Episode:
    """One live episode of the loop."""

    index: int
    task: dict
    traj: Trajectory | None = None
    env_id: str = ""
    verdict: str = "running"
    reward: float = 0.0
    reason: str = ""
    env_seconds: float = 0.0
    env_steps: int = 0
    tool_errors: int = 0
    truncated_turn: bool = False
    versions: set = field(default_factory=set)
    opened: tuple = ()
    """(messages, tools) of the OpenEpisode reply: a replayed episode must open the same."""
    exchanges: list = field(default_factory=list)
    """(assistant text stepped, observation messages received) of every step that went on."""
    retries: int = 0
    replays: int = 0
    restarts: int = 0
    lost: bool = False
    """Masked because the env service lost it and every retry was spent."""


@dataclass(frozen=True)
class EnvRetry:
    """How an episode whose env service lost it is retried (see the module docstring)."""

    retries: int = 4
    """Fresh episodes tried per episode before it is masked (`error`); 0: mask at the first loss."""
    backoff_s: float = 1.0
    """Sleep before the first retry, seconds; doubles each retry (a restarted service needs a moment)."""
    max_backoff_s: float = 30.0


@dataclass(frozen=True)
class _Run:
    """What every env call of one run_episodes needs besides the episode."""

    env: object
    tokenizer: object
    env_name: str
    limits: EpisodeLimits
    sampling: object
    retry: EnvRetry
    timeout: float | None


def verdict_name(value: int) -> str:
    """env.proto EpisodeVerdict -> its short name (EPISODE_VERDICT_LIMIT_TURNS -> `limit_turns`)."""
    return env_pb2.EpisodeVerdict.Name(value).removeprefix("EPISODE_VERDICT_").lower()


def turn_budget(sequence_len: int, limits: EpisodeLimits, max_tokens: int) -> int:
    """Tokens the next turn may sample: min(max_tokens, max_episode_tokens − tokens so far), ≥ 0."""
    return max(0, min(max_tokens, limits.max_episode_tokens - sequence_len))


def limit_after_step(turns: int, env_seconds: float, sequence_len: int, limits: EpisodeLimits) -> str | None:
    """The limit a still-running episode has reached after a step, or None: turns ≥ max_turns ->
    `limit_turns`; env seconds ≥ env_seconds -> `limit_env_seconds`; sequence ≥ max_episode_tokens ->
    `limit_tokens` (checked in that order)."""
    if turns >= limits.max_turns:
        return "limit_turns"
    if env_seconds >= limits.env_seconds:
        return "limit_env_seconds"
    if sequence_len >= limits.max_episode_tokens:
        return "limit_tokens"
    return None


def retry_delay(attempt: int, retry: EnvRetry) -> float:
    """Seconds before retry `attempt` (1-based): min(backoff_s · 2^(attempt−1), max_backoff_s)."""
    return min(retry.backoff_s * 2.0 ** (attempt - 1), retry.max_backoff_s)


def env_lost(exc: BaseException) -> bool:
    """True when an env call failed because the service lost the episode: UNAVAILABLE (down), or
    NOT_FOUND for an id it does not know ("no episode …": a restarted service). NOT_FOUND for an
    episode the service ended itself ("… has been closed …") or an unknown environment is not."""
    if isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):
        code, text = exc.code(), exc.details() or ""
        return code == grpc.StatusCode.UNAVAILABLE or (code == grpc.StatusCode.NOT_FOUND and text.startswith("no episode"))
    if isinstance(exc, Unavailable):
        return True
    return isinstance(exc, NotFound) and str(exc).startswith("no episode")


def prompt_length(mask: Sequence[int]) -> int:
    """Tokens before the first policy token (the whole row when there is none)."""
    for i, m in enumerate(mask):
        if m:
            return i
    return len(mask)


def token_prompt(ids: Sequence[int]) -> policy_pb2.Prompt:
    return policy_pb2.Prompt(token_ids=np.asarray(ids, dtype="<i4").tobytes())


def run_episodes(policy, env, tokenizer, env_name: str, tasks: Sequence[dict], n: int, sampling,
                 limits: EpisodeLimits, seed: int | None, workers: int = 8, overlap: bool = True,
                 timeout: float | None = None, retry: EnvRetry = EnvRetry()) -> dict:
    """`n` episodes per task (episode j of task i = i*n + j), run to their end. Returns the step's
    artefact: per episode "input_ids", "loss_mask", "logprobs", "prompt_len", "rewards", "verdicts",
    "reasons", "turns", "env_steps", "env_seconds", "tool_errors", "truncated" (ended by its token
    limit), "env_retries", "env_replays", "env_restarts" (fresh episodes after the env service lost
    one, by how each went on), and "weight_versions" (every version that sampled a turn),
    "generate_calls", "seconds"."""
    start = time.perf_counter()
    run = _Run(env, tokenizer, env_name, limits, sampling, retry, timeout)
    episodes = [Episode(i * n + j, task) for i, task in enumerate(tasks) for j in range(n)]
    with ThreadPoolExecutor(max(1, workers), thread_name_prefix="env-step") as pool:
        ready = [ep for ep, ok in zip(episodes, pool.map(lambda e: _open(run, e), episodes)) if ok]
        pending: dict[Future, Episode] = {}
        calls = 0
        while ready or pending:
            if ready:
                batch = _budgeted(run, ready)
                ready = []
                if batch:
                    _generate(policy, batch, sampling, limits, None if seed is None else seed + calls, timeout)
                    calls += 1
                    for ep in batch:
                        if ep.verdict != "running":
                            continue
                        if ep.truncated_turn and turn_budget(len(ep.traj.ids), limits, sampling.max_tokens) == 0:
                            if not _end(run, ep, "limit_tokens", "the episode reached max_episode_tokens"):
                                ready.append(ep)  # restarted from scratch
                            continue
                        pending[pool.submit(_step, run, ep)] = ep
            if pending:
                done, _ = wait(list(pending), return_when=FIRST_COMPLETED if overlap else ALL_COMPLETED)
                for fut in done:
                    ep = pending.pop(fut)
                    if fut.result():
                        limit = limit_after_step(ep.traj.turns, ep.env_seconds, len(ep.traj.ids), limits)
                        if not limit or not _end(run, ep, limit, f"the episode reached its {limit.removeprefix('limit_')} limit"):
                            ready.append(ep)
    return _collect(episodes, calls, time.perf_counter() - start)


def _open(run: _Run, ep: Episode) -> bool:
    """OpenEpisode and the trajectory's prompt; True when the episode runs (retried while the service is lost)."""
    while True:
        try:
            _open_fresh(run, ep)
            return True
        except Exception as exc:  # noqa: BLE001 — an env failure is the episode's verdict, not the step's
            if not (env_lost(exc) and _may_retry(run, ep)):
                ep.lost = env_lost(exc)
                _fail(run, ep, f"OpenEpisode: {exc}")
                return False


def _open_fresh(run: _Run, ep: Episode) -> env_pb2.OpenEpisodeResponse:
    """A fresh OpenEpisode for `ep`'s task, and its trajectory started over (turns, counts, versions reset)."""
    reply = run.env.call("OpenEpisode", env_pb2.OpenEpisodeRequest(
        environment=run.env_name, task_json=json.dumps(ep.task), max_turns=run.limits.max_turns), timeout=run.timeout)
    ep.env_id = reply.episode_id
    messages = [{"role": m.role, "content": m.content} for m in reply.messages]
    tools = json.loads(reply.tools_json) if reply.tools_json else None
    ep.traj = Trajectory.start(run.tokenizer, messages, tools, run.sampling.thinking)
    ep.opened, ep.exchanges = (messages, tools), []
    ep.env_seconds, ep.env_steps, ep.tool_errors, ep.truncated_turn, ep.versions = 0.0, 0, 0, False, set()
    return reply


def _may_retry(run: _Run, ep: Episode) -> bool:
    """Count one retry and sleep its backoff; False when the episode's retries are spent."""
    if ep.retries >= run.retry.retries:
        return False
    ep.retries += 1
    delay = retry_delay(ep.retries, run.retry)
    log.warning(f"env service lost episode {ep.index}; retry {ep.retries} of {run.retry.retries} in {delay:.1f}s",
                extra={"episode": ep.env_id, "retry": ep.retries})
    time.sleep(delay)
    return True


def _recover(run: _Run, ep: Episode, what: str, exc: BaseException) -> str:
    """After `what` failed with `exc`: `replayed` (a fresh episode at the same point: redo `what`),
    `restarted` (from scratch: the episode needs its first turn) or `failed` (masked, `error`)."""
    while env_lost(exc) and _may_retry(run, ep):
        try:
            if _replay(run, ep):
                ep.replays += 1
                return "replayed"
            _close(run, ep)
            _open_fresh(run, ep)
            ep.restarts += 1
            return "restarted"
        except Exception as again:  # noqa: BLE001
            exc = again
    ep.lost = env_lost(exc)
    _fail(run, ep, f"{what}: {exc}" + (f" ({ep.retries} retries on fresh episodes spent)" if ep.lost else ""))
    return "failed"


def _replay(run: _Run, ep: Episode) -> bool:
    """Open a fresh episode and step the recorded turns again; True when every observation came back as
    the policy saw it, False at the first difference. Either way (and when a call raises) `ep` keeps its
    trajectory and figures; only its env id is the fresh episode's."""
    kept = (ep.traj, ep.opened, ep.exchanges, ep.env_seconds, ep.env_steps, ep.tool_errors, ep.truncated_turn,
            ep.versions)
    try:
        _open_fresh(run, ep)
        if ep.opened != kept[1]:
            return False
        for text, observation in kept[2]:
            reply = run.env.call("Step", env_pb2.StepRequest(episode_id=ep.env_id, assistant_text=text),
                                 timeout=run.timeout)
            if reply.done or [{"role": m.role, "content": m.content} for m in reply.messages] != observation:
                return False
        return True
    finally:
        (ep.traj, ep.opened, ep.exchanges, ep.env_seconds, ep.env_steps, ep.tool_errors, ep.truncated_turn,
         ep.versions) = kept


def _budgeted(run: _Run, ready: list[Episode]) -> list[Episode]:
    """The ready episodes that may still sample (the others end at their token limit)."""
    out = []
    for ep in ready:
        budget = turn_budget(len(ep.traj.ids), run.limits, run.sampling.max_tokens)
        if budget > 0 or not _end(run, ep, "limit_tokens", "the episode reached max_episode_tokens"):
            out.append(ep)
    return out


def _generate(policy, batch: list[Episode], sampling, limits: EpisodeLimits, seed, timeout) -> None:
    """One Generate for every episode of `batch`: max_tokens = the largest budget of the batch, each
    turn cut at its own episode's budget (the sampled ids kept exactly, with their log π_inf)."""
    budgets = [turn_budget(len(ep.traj.ids), limits, sampling.max_tokens) for ep in batch]
    params = sampling_params(sampling, seed)
    params.max_tokens = max(budgets)
    reply = policy.call("Generate", policy_pb2.GenerateRequest(
        prompts=[token_prompt(ep.traj.ids) for ep in batch], n=1, sampling=params), timeout=timeout)
    ids = codec.decode(reply.token_ids, "token_ids", "int32")
    lps = codec.decode(reply.logprobs, "logprobs", "float32")
    for ep, budget, row, lp in zip(batch, budgets, ids, lps):
        ep.versions.add(int(reply.weight_version))
        row, lp = row.tolist()[:budget], lp.tolist()[:budget]
        if not row:
            ep.verdict, ep.reason = "ok", "the policy ended its turn without a token"
            continue
        ep.truncated_turn = len(row) == budget
        ep.traj.add_turn(row, lp)


def _step(run: _Run, ep: Episode) -> bool:
    """Env.Step of the episode's last turn; True when it goes on (its observation appended, or
    restarted from scratch after its env was lost)."""
    text = ep.traj.messages[-1]["content"].split(IM_END)[0]
    while True:
        try:
            reply = run.env.call("Step", env_pb2.StepRequest(episode_id=ep.env_id, assistant_text=text),
                                 timeout=run.timeout)
            break
        except Exception as exc:  # noqa: BLE001
            how = _recover(run, ep, "Step", exc)
            if how != "replayed":
                return how == "restarted"
    ep.env_steps += 1
    ep.env_seconds += float(reply.env_seconds)
    ep.tool_errors += int(reply.tool_errors)
    if reply.done:
        ep.verdict, ep.reward, ep.reason = verdict_name(reply.verdict), float(reply.reward), reply.reason
        if ep.verdict == "error":
            ep.reward = 0.0
        _close(run, ep)
        return False
    observation = [{"role": m.role, "content": m.content} for m in reply.messages]
    try:
        ep.traj.add_observation(observation)
    except Exception as exc:  # noqa: BLE001 — the template cannot continue the conversation
        _fail(run, ep, f"observation: {exc}")
        return False
    ep.exchanges.append((text, observation))
    return True


def _end(run: _Run, ep: Episode, verdict: str, reason: str) -> bool:
    """End a running episode at a limit: CloseEpisode scores the state it reached. False when its env
    was lost and it restarted from scratch instead (it runs on)."""
    while True:
        try:
            reply = run.env.call("CloseEpisode", env_pb2.CloseEpisodeRequest(episode_id=ep.env_id), timeout=run.timeout)
            break
        except Exception as exc:  # noqa: BLE001
            how = _recover(run, ep, "CloseEpisode", exc)
            if how != "replayed":
                return how != "restarted"
    if verdict_name(reply.verdict) == "error":
        ep.verdict, ep.reward, ep.reason = "error", 0.0, reply.reason
    else:
        ep.verdict, ep.reward, ep.reason = verdict, float(reply.reward), f"{reason}; {reply.reason}"
    return True


def _close(run: _Run, ep: Episode) -> None:
    """Free an ended episode on the service (its verdict is already known)."""
    try:
        run.env.call("CloseEpisode", env_pb2.CloseEpisodeRequest(episode_id=ep.env_id), timeout=run.timeout)
    except Exception as exc:  # noqa: BLE001 — the service reaps it at its deadline
        log.warning("CloseEpisode failed", extra={"episode": ep.env_id, "error": str(exc)})


def _fail(run: _Run, ep: Episode, reason: str) -> None:
    ep.verdict, ep.reward, ep.reason = "error", 0.0, reason
    if ep.env_id:
        _close(run, ep)


def _collect(episodes: list[Episode], calls: int, seconds: float) -> dict:
    samples = [ep.traj.sample() if ep.traj is not None else None for ep in episodes]
    return {
        "input_ids": [s.input_ids if s else [] for s in samples],
        "loss_mask": [s.loss_mask if s else [] for s in samples],
        "logprobs": [s.inference_logprobs if s else [] for s in samples],
        "prompt_len": [prompt_length(s.loss_mask) if s else 0 for s in samples],
        "rewards": [ep.reward for ep in episodes],
        "verdicts": [ep.verdict for ep in episodes],
        "reasons": [ep.reason for ep in episodes],
        "turns": [s.turns if s else 0 for s in samples],
        "env_steps": [ep.env_steps for ep in episodes],
        "env_seconds": [ep.env_seconds for ep in episodes],
        "tool_errors": [ep.tool_errors for ep in episodes],
        "truncated": [ep.verdict == "limit_tokens" for ep in episodes],
        "env_retries": [ep.retries for ep in episodes],
        "env_replays": [ep.replays for ep in episodes],
        "env_restarts": [ep.restarts for ep in episodes],
        "env_lost": [ep.lost for ep in episodes],
        "weight_versions": sorted({v for ep in episodes for v in ep.versions}),
        "generate_calls": calls,
        "seconds": seconds,
    }


def episode_metrics(out: dict) -> dict[str, float]:
    """A step's episode figures: `episodes/turns_mean` (assistant turns per episode),
    `episodes/env_seconds_per_turn` (Σ env seconds / Σ env steps), `episodes/env_seconds` and
    `episodes/env_steps` (the two sums), `episodes/tool_errors` (Σ),
    `episodes/policy_tokens`, `episodes/limit_<l>` (episodes ended by each limit, 0 included),
    `episodes/env_retries` (Σ fresh episodes opened after the env service lost one), `episodes/env_replays`
    and `episodes/env_restarts` (Σ of those that replayed the turns / started over), `episodes/env_lost`
    (episodes the env service lost, masked as `error` once their retries were spent)."""
    steps = sum(out["env_steps"])
    metrics = {
        "episodes/turns_mean": float(np.mean(out["turns"])) if out["turns"] else 0.0,
        "episodes/env_seconds_per_turn": float(sum(out["env_seconds"]) / steps) if steps else 0.0,
        "episodes/env_seconds": float(sum(out["env_seconds"])),
        "episodes/env_steps": float(steps),
        "episodes/tool_errors": float(sum(out["tool_errors"])),
        "episodes/policy_tokens": float(sum(sum(m) for m in out["loss_mask"])),
        "episodes/generate_calls": float(out["generate_calls"]),
    }
    for limit in LIMIT_VERDICTS:
        metrics[f"episodes/{limit}"] = float(out["verdicts"].count(limit))
    for key in ("env_retries", "env_replays", "env_restarts", "env_lost"):
        metrics[f"episodes/{key}"] = float(sum(out.get(key, ())))  # absent from artefacts stored before them
    return metrics
