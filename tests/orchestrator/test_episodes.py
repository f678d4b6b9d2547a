"""The multi-turn rollout loop against the real env core (its servicer called in process) and policies:
the tiny model's real PolicyCore, and a scripted policy that answers the Generate contract with turns
written here (a tool call, then a final answer), so the loss mask of a multi-turn sample can be checked
token by token. Env failures are injected at the transport (a call that raises), never inside the core."""

from __future__ import annotations

import json
import random
import threading
import time

import numpy as np
import pytest

from services.common import codec
from services.common.chat_template import IM_END, render
from services.common.pb import policy_pb2
from services.common.synth.multiturn import ENVIRONMENT_NAMES, workbench
from services.common.toolcalls import format_tool_calls
from services.orchestrator.cascade_schema import SamplingConfig
from services.orchestrator.episodes import (
    EnvRetry,
    EpisodeLimits,
    env_lost,
    episode_metrics,
    limit_after_step,
    prompt_length,
    retry_delay,
    run_episodes,
    turn_budget,
    verdict_name,
)
from tests.orchestrator.steps.conftest import InProcess

LIMITS = EpisodeLimits(max_turns=4, max_episode_tokens=4096, env_seconds=60.0)
QUICK = EnvRetry(retries=3, backoff_s=0.01)
SAMPLING = SamplingConfig(temperature=1.0, max_tokens=48, thinking=False)


@pytest.fixture(scope="module")
def env():
    from services.env.config import EnvConfig
    from services.env.core import EnvCore
    from services.env.server import EnvServicer

    core = EnvCore(EnvConfig(sandbox_workers=1, sandbox_base_uid=63700, tool_timeout_s=3.0))
    yield InProcess(EnvServicer(core))
    core.close_all()


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from services.common.modelio import load_tokenizer

    return load_tokenizer(str(tiny_model_dir))


@pytest.fixture(scope="module")
def tasks():
    """Two synthetic workbench tasks (they offer the directory lookup and the tools of their answer)."""
    return workbench.make_tasks(random.Random(7), 2, "train")


class ScriptedPolicy:
    """The Generate contract with scripted turns: turn k of an episode (counted from the prompt's
    assistant turns) is `turns[k]`, tokenised, with log π_inf = −0.5 on each token."""

    def __init__(self, tokenizer, turns: list[str]):
        self.tokenizer, self.turns = tokenizer, turns
        self.batches: list[int] = []
        self.lock = threading.Lock()

    def call(self, method, request, timeout=None):
        assert method == "Generate" and request.n == 1
        with self.lock:
            self.batches.append(len(request.prompts))
        rows = []
        for p in request.prompts:
            text = self.tokenizer.decode(np.frombuffer(p.token_ids, dtype="<i4").tolist(), skip_special_tokens=False)
            k = text.count("<|im_start|>assistant") - 1
            ids = self.tokenizer.encode(self.turns[min(k, len(self.turns) - 1)] + IM_END, add_special_tokens=False)
            rows.append(ids[:request.sampling.max_tokens])
        return policy_pb2.GenerateResponse(
            token_ids=codec.encode(rows, "int32"), logprobs=codec.encode([[-0.5] * len(r) for r in rows], "float32"),
            texts=[self.tokenizer.decode(r) for r in rows], weight_version=0,
            finish_reasons=[policy_pb2.FINISH_REASON_STOP] * len(rows))


def lookup_then_answer(tokenizer):
    call = format_tool_calls([{"name": "company_directory_find_email_address", "arguments": {"name": "ana"}}])
    return ScriptedPolicy(tokenizer, [call, "Done."])


class FlakyEnv:
    """The env client with a transport that fails (raises) or is slow for chosen episodes' Step calls."""

    def __init__(self, env, fail_steps=(), slow: dict | None = None):
        """fail_steps: the Step calls (1-based, in the order they come) that raise; slow: seconds each Step
        of the k-th opened episode takes."""
        self.env, self.fail_steps, self.slow = env, set(fail_steps), slow or {}
        self.opened: list[str] = []
        self.steps = 0
        self.lock = threading.Lock()

    def call(self, method, request, timeout=None):
        if method == "OpenEpisode":
            reply = self.env.call(method, request, timeout)
            with self.lock:
                self.opened.append(reply.episode_id)
            return reply
        if method == "Step":
            index = self.opened.index(request.episode_id)
            with self.lock:
                self.steps += 1
                nth = self.steps
            if nth in self.fail_steps:
                raise ConnectionError("env service unreachable")
            time.sleep(self.slow.get(index, 0.0))
        return self.env.call(method, request, timeout)


def fresh_env():
    from services.env.config import EnvConfig
    from services.env.core import EnvCore
    from services.env.server import EnvServicer

    return InProcess(EnvServicer(EnvCore(EnvConfig(sandbox_workers=1, sandbox_base_uid=63700, tool_timeout_s=3.0))))


class RestartingEnv:
    """The env client of a service that dies at chosen Step calls (1-based, in the order they come):
    that call is UNAVAILABLE and every later call reaches a fresh service (a new EnvCore, its episode table
    empty: the lost episodes are NOT_FOUND there). `down` Step calls fail from the first one on, for good.
    `alter`: the fresh service's tool results differ from the first's (a tool that does not reproduce)."""

    def __init__(self, die_at=(), down: bool = False, alter: bool = False):
        self.env, self.die_at, self.down, self.alter = fresh_env(), set(die_at), down, alter
        self.steps, self.restarts, self.cores = 0, 0, [self.env]
        self.lock = threading.Lock()

    def call(self, method, request, timeout=None):
        from services.common.errors import Unavailable

        with self.lock:
            if method == "Step":
                self.steps += 1
                if self.steps in self.die_at or (self.down and self.steps >= min(self.die_at)):
                    if not self.down:
                        self.env, self.restarts = fresh_env(), self.restarts + 1
                        self.cores.append(self.env)
                    raise Unavailable("the env service is down")
            env = self.env
        if self.down and self.steps >= min(self.die_at) and method == "OpenEpisode":
            raise Unavailable("the env service is down")
        reply = env.call(method, request, timeout)
        if self.alter and self.restarts and method == "Step":
            for m in reply.messages:
                m.content += " (served by a restarted service)"
        return reply

    def close(self):
        for core in self.cores:
            core.servicer.core.close_all()


# ------------------------------------------------------------------ pure parts
def test_pure_rules():
    assert turn_budget(100, EpisodeLimits(4, 130, 1.0), 48) == 30
    assert turn_budget(100, EpisodeLimits(4, 1000, 1.0), 48) == 48
    assert turn_budget(200, EpisodeLimits(4, 130, 1.0), 48) == 0
    lim = EpisodeLimits(3, 500, 2.0)
    assert limit_after_step(3, 0.0, 10, lim) == "limit_turns"
    assert limit_after_step(1, 2.5, 10, lim) == "limit_env_seconds"
    assert limit_after_step(1, 0.1, 500, lim) == "limit_tokens"
    assert limit_after_step(1, 0.1, 10, lim) is None
    assert verdict_name(4) == "limit_turns" and verdict_name(2) == "ok"
    assert prompt_length([0, 0, 1, 0]) == 2 and prompt_length([0, 0]) == 2


def test_retry_rules(env, tasks):
    import grpc

    from services.common.errors import NotFound, Unavailable
    from services.common.pb import env_pb2

    assert [retry_delay(k, EnvRetry(backoff_s=1.0, max_backoff_s=5.0)) for k in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 5.0]

    class Status(grpc.RpcError):
        def __init__(self, code, details):
            self._code, self._details = code, details

        def code(self):
            return self._code

        def details(self):
            return self._details

    assert env_lost(Status(grpc.StatusCode.UNAVAILABLE, "connection refused"))
    assert env_lost(Status(grpc.StatusCode.NOT_FOUND, "no episode 'workbench-1'"))
    assert not env_lost(Status(grpc.StatusCode.NOT_FOUND, "episode workbench-1 has been closed at its deadline"))
    assert not env_lost(Status(grpc.StatusCode.NOT_FOUND, "unknown environment 'x'; environments: python"))
    assert not env_lost(Status(grpc.StatusCode.INVALID_ARGUMENT, "max_turns: must be in [1, 64]"))
    assert env_lost(Unavailable("down")) and env_lost(NotFound("no episode 'x'"))
    assert not env_lost(ConnectionError("unreachable")) and not env_lost(NotFound("episode x has been closed"))
    # the env core's own words: an id it never opened is lost; one it closed is not
    with pytest.raises(NotFound) as unknown:
        env.call("Step", env_pb2.StepRequest(episode_id="workbench-from-a-previous-life", assistant_text="x"))
    opened = env.call("OpenEpisode", env_pb2.OpenEpisodeRequest(environment="workbench", task_json=json.dumps(tasks[0])))
    env.call("CloseEpisode", env_pb2.CloseEpisodeRequest(episode_id=opened.episode_id))
    with pytest.raises(NotFound) as closed:
        env.call("Step", env_pb2.StepRequest(episode_id=opened.episode_id, assistant_text="x"))
    assert env_lost(unknown.value) and not env_lost(closed.value)


def test_the_stage_environments_are_the_services():
    from services.env.environments import ENVIRONMENTS

    assert ENVIRONMENT_NAMES == tuple(sorted(ENVIRONMENTS))


# ------------------------------------------------------------------ the loop
def test_loss_mask_of_a_multi_turn_sample_token_by_token(env, tokenizer, tasks):
    policy = lookup_then_answer(tokenizer)
    out = run_episodes(policy, env, tokenizer, "workbench", tasks[:1], 1, SAMPLING, LIMITS, seed=0)
    assert out["verdicts"] == ["ok"] and out["turns"] == [2] and out["env_steps"] == [2]
    ids, mask, lps = out["input_ids"][0], out["loss_mask"][0], out["logprobs"][0]
    assert len(ids) == len(mask) == len(lps)
    turns = [tokenizer.encode(t + IM_END, add_special_tokens=False) for t in policy.turns]
    # the mask-1 runs are exactly the two sampled turns, in order, with their log π_inf
    runs, cur = [], []
    for i, m in zip(ids, mask):
        if m:
            cur.append(i)
        elif cur:
            runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    assert runs == turns
    assert all(lp == -0.5 for lp, m in zip(lps, mask) if m) and all(lp == 0.0 for lp, m in zip(lps, mask) if not m)
    # the env's tokens (mask 0) are the prompt, the tool result and the generation prompts
    env_text = tokenizer.decode([i for i, m in zip(ids, mask) if not m], skip_special_tokens=False)
    assert "<tool_response>" in env_text or "tool" in env_text
    assert "ana.lopez@northwind.com" in env_text  # the lookup's answer came back as an observation
    assert out["prompt_len"][0] == mask.index(1)
    # the whole sequence is the conversation as the template renders it
    text = tokenizer.decode(ids, skip_special_tokens=False)
    assert text.startswith(render(tokenizer, tasks[0]["messages"], False, add_generation_prompt=True,
                                  tools=None)[:40])


def test_an_env_failure_mid_episode_is_an_error_verdict_and_the_rest_go_on(env, tokenizer, tasks):
    flaky = FlakyEnv(env, fail_steps={2})
    out = run_episodes(lookup_then_answer(tokenizer), flaky, tokenizer, "workbench", tasks, 2, SAMPLING, LIMITS, seed=0)
    bad = out["verdicts"].index("error")
    assert out["rewards"][bad] == 0.0 and "unreachable" in out["reasons"][bad]
    assert [v for i, v in enumerate(out["verdicts"]) if i != bad] == ["ok"] * 3
    assert sorted(out["turns"]) == [1, 2, 2, 2]
    m = episode_metrics(out)
    assert m["episodes/turns_mean"] == pytest.approx((2 + 1 + 2 + 2) / 4)
    assert m["episodes/limit_turns"] == 0.0 and m["episodes/tool_errors"] == 0.0


def test_limits_end_episodes_with_the_limit_named(env, tokenizer, tasks):
    looping = ScriptedPolicy(tokenizer, [lookup_then_answer(tokenizer).turns[0]])  # never answers
    out = run_episodes(looping, env, tokenizer, "workbench", tasks[:1], 2, SAMPLING,
                       EpisodeLimits(max_turns=2, max_episode_tokens=4096, env_seconds=60.0), seed=0)
    assert out["verdicts"] == ["limit_turns"] * 2 and out["turns"] == [2, 2]
    out = run_episodes(looping, env, tokenizer, "workbench", tasks[:1], 1, SAMPLING,
                       EpisodeLimits(max_turns=8, max_episode_tokens=len(out["input_ids"][0]) - 5, env_seconds=60.0),
                       seed=0)
    assert out["verdicts"] == ["limit_tokens"] and out["truncated"] == [True]
    assert len(out["input_ids"][0]) <= 4096
    slow = FlakyEnv(env, slow={0: 0.3})
    out = run_episodes(looping, slow, tokenizer, "workbench", tasks[:1], 1, SAMPLING,
                       EpisodeLimits(max_turns=8, max_episode_tokens=4096, env_seconds=0.25), seed=0)
    assert out["verdicts"] == ["limit_env_seconds"] or out["verdicts"] == ["limit_turns"]
    assert episode_metrics(out)["episodes/" + out["verdicts"][0]] == 1.0


def test_an_episode_back_early_does_not_wait_for_a_slow_sibling(env, tokenizer, tasks):
    policy = lookup_then_answer(tokenizer)
    slow = FlakyEnv(env, slow={0: 0.6})
    out = run_episodes(policy, slow, tokenizer, "workbench", tasks[:1], 2, SAMPLING, LIMITS, seed=0)
    assert out["verdicts"] == ["ok", "ok"]
    assert policy.batches[0] == 2 and 1 in policy.batches[1:]  # the fast episode's turn 2 went alone
    policy = lookup_then_answer(tokenizer)
    run_episodes(policy, FlakyEnv(env, slow={0: 0.6}), tokenizer, "workbench", tasks[:1], 2, SAMPLING, LIMITS,
                 seed=0, overlap=False)
    assert policy.batches == [2, 2]  # the baseline waits for every call of the batch


def test_the_tiny_model_over_the_real_policy(env, tokenizer, tasks, tiny_model_dir):
    from services.policy.config import PolicyConfig
    from services.policy.core import PolicyCore
    from services.policy.server import PolicyServicer

    policy = InProcess(PolicyServicer(PolicyCore.build(PolicyConfig(model=str(tiny_model_dir)))))
    out = run_episodes(policy, env, tokenizer, "workbench", tasks, 2, SamplingConfig(max_tokens=16), LIMITS, seed=3)
    assert len(out["verdicts"]) == 4 and all(v in ("ok", "limit_turns", "limit_tokens") for v in out["verdicts"])
    for ids, mask, lps in zip(out["input_ids"], out["loss_mask"], out["logprobs"]):
        assert len(ids) == len(mask) == len(lps) and sum(mask) >= 1
        assert all(lp <= 0.0 for lp, m in zip(lps, mask) if m) and all(lp == 0.0 for lp, m in zip(lps, mask) if not m)
    assert out["weight_versions"] == [0]


# ------------------------------------------------------------------ a lost env service
def test_a_lost_episode_is_replayed_on_a_fresh_episode_and_keeps_its_sample(env, tokenizer, tasks):
    calm = run_episodes(lookup_then_answer(tokenizer), env, tokenizer, "workbench", tasks, 2, SAMPLING, LIMITS, seed=0)
    dying = RestartingEnv(die_at={6})  # steps 1-4: every episode's lookup; step 6: an answer, then NOT_FOUND
    policy = lookup_then_answer(tokenizer)
    try:
        out = run_episodes(policy, dying, tokenizer, "workbench", tasks, 2, SAMPLING, LIMITS, seed=0, retry=QUICK)
    finally:
        dying.close()
    assert dying.restarts == 1
    assert out["verdicts"] == ["ok"] * 4 and out["rewards"] == calm["rewards"]
    # the samples are the very ones drawn: same tokens, mask and log π_inf as without the crash
    assert out["input_ids"] == calm["input_ids"] and out["loss_mask"] == calm["loss_mask"]
    assert out["logprobs"] == calm["logprobs"] and out["turns"] == calm["turns"]
    assert out["env_steps"] == calm["env_steps"]
    assert sum(policy.batches) == 4 * 2, "no turn generated twice (the batches' split depends on timing)"
    # step 6 lost its episode (UNAVAILABLE); the steps after it found theirs gone (NOT_FOUND): each replayed
    assert sum(out["env_retries"]) == sum(out["env_replays"]) >= 2 and out["env_restarts"] == [0] * 4
    m = episode_metrics(out)
    assert m["episodes/env_replays"] == sum(out["env_replays"]) and m["episodes/env_lost"] == 0.0


def test_an_episode_whose_observation_does_not_reproduce_starts_over(env, tokenizer, tasks):
    calm = run_episodes(lookup_then_answer(tokenizer), env, tokenizer, "workbench", tasks[:1], 1, SAMPLING, LIMITS, seed=0)
    dying = RestartingEnv(die_at={2}, alter=True)
    policy = lookup_then_answer(tokenizer)
    try:
        out = run_episodes(policy, dying, tokenizer, "workbench", tasks[:1], 1, SAMPLING, LIMITS, seed=0, retry=QUICK)
    finally:
        dying.close()
    assert out["verdicts"] == ["ok"] and out["env_retries"] == [1] and out["env_restarts"] == [1]
    assert out["env_replays"] == [0]
    assert out["turns"] == [2] and out["env_steps"] == [2], "the discarded turns are not counted"
    assert out["input_ids"] != calm["input_ids"], "the new trajectory holds the fresh service's observation"
    assert "(served by a restarted service)" in tokenizer.decode(out["input_ids"][0], skip_special_tokens=False)
    assert policy.batches == [1, 1, 1, 1], "the turns were generated again: lookup, answer (lost), lookup, answer"


def test_an_episode_is_masked_once_its_retries_are_spent(env, tokenizer, tasks):
    down = RestartingEnv(die_at={2}, down=True)
    try:
        start = time.monotonic()
        out = run_episodes(lookup_then_answer(tokenizer), down, tokenizer, "workbench", tasks[:1], 2, SAMPLING, LIMITS,
                           seed=0, retry=EnvRetry(retries=2, backoff_s=0.05))
        seconds = time.monotonic() - start
    finally:
        down.close()
    assert out["verdicts"] == ["error", "error"] and out["rewards"] == [0.0, 0.0]
    assert out["env_retries"] == [2, 2] and out["env_lost"] == [True, True]
    assert all("retries on fresh episodes spent" in r and "down" in r for r in out["reasons"])
    assert seconds >= 0.05 + 0.1, "each retry waited its backoff"
    assert episode_metrics(out)["episodes/env_lost"] == 2.0
    out = run_episodes(lookup_then_answer(tokenizer), RestartingEnv(die_at={1}, down=True), tokenizer, "workbench",
                       tasks[:1], 1, SAMPLING, LIMITS, seed=0, retry=EnvRetry(retries=0))
    assert out["verdicts"] == ["error"] and out["env_retries"] == [0] and out["env_lost"] == [True]
