"""EnvCore: the episode table of the env service — open, step, close, expire — over the environments.

Each episode holds its environment's state (tables, files, interpreter cells) and nothing else;
no two episodes share a mutable object. A step takes one assistant turn: the text after the last
`</think>` is read for `<tool_call>` blocks, one at a time (`turn.py`); no block = the final answer
and the episode ends with its reward (verdict `ok`); each call runs with a budget of
min(the tool's timeout, time to the deadline, env seconds left) and its result, cut to
`tool_output_chars`, comes back as a `tool` message; a malformed block, an unknown tool or a failing
call comes back as error text. Limits end an episode with a verdict naming the limit
(`limit_turns`, `limit_deadline`, `limit_env_seconds`), its reward scoring the state reached; an
environment that fails ends it with `error` (mask it out of the loss). A reaper thread closes
episodes past their deadline and frees what they started. No gRPC imports here.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

from services.common.errors import FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted
from services.common.sandbox.isolation import Limits
from services.common.sandbox.sandbox import Sandbox
from services.common.toolcalls import MalformedToolCall
from services.env import metrics
from services.env.config import EnvConfig
from services.env.environments import ENVIRONMENTS
from services.env.environments.base import (
    Environment,
    EnvironmentFailure,
    EpisodeState,
    Services,
    ToolError,
    truncate,
)
from services.env.turn import answer_part, split_tool_calls

log = logging.getLogger(__name__)
VERDICTS = ("running", "ok", "error", "limit_turns", "limit_deadline", "limit_env_seconds", "closed")
_TOMBSTONES = 10_000


@dataclass
class Episode:
    id: str
    env: Environment
    state: EpisodeState
    deadline: float
    """time.monotonic() at which the episode expires."""
    max_turns: int
    turns: int = 0
    env_seconds: float = 0.0
    verdict: str = "running"
    reward: float = 0.0
    reason: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True)
class Opened:
    id: str
    messages: list[dict]
    tools: list[dict]
    deadline_s: float
    max_turns: int


@dataclass(frozen=True)
class StepResult:
    messages: list[dict]
    done: bool
    reward: float
    verdict: str
    reason: str
    tool_errors: int
    env_seconds: float
    turns: int


@dataclass(frozen=True)
class Closed:
    reward: float
    verdict: str
    reason: str
    turns: int
    env_seconds: float


def build_sandbox(config: EnvConfig) -> Sandbox:
    limits = Limits(cpu_s=max(1, int(config.tool_timeout_s + 0.999)), memory_mb=config.sandbox_memory_mb,
                    nproc=config.sandbox_nproc, fsize_mb=config.sandbox_fsize_mb, nofile=config.sandbox_nofile,
                    wall_s=config.tool_timeout_s)
    sandbox = Sandbox(workers=config.sandbox_workers, limits=limits, python=config.sandbox_python,
                      root=config.sandbox_root, base_uid=config.sandbox_base_uid, allow_unisolated=config.allow_unisolated)
    if sandbox.isolation != "namespace":
        action = "running tools WITHOUT isolation" if config.allow_unisolated else "swe and python episodes are refused"
        log.error("SANDBOX NOT ISOLATED: %s; %s", sandbox.problem, action)
    return sandbox


class EnvCore:
    """The env service's one core object (thread-safe; steps of different episodes run in parallel)."""

    def __init__(self, config: EnvConfig, sandbox: Sandbox | None = None):
        self.config = config
        self._owns_sandbox = sandbox is None
        self.sandbox = sandbox if sandbox is not None else build_sandbox(config)
        services = Services(config=config, sandbox=self.sandbox)
        self.environments: dict[str, Environment] = {name: cls(services) for name, cls in sorted(ENVIRONMENTS.items())}
        self._episodes: dict[str, Episode] = {}
        self._ended: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._reaper = threading.Thread(target=self._reap_loop, name="env-reaper", daemon=True)
        self._reaper.start()

    # -- episodes -----------------------------------------------------------------------------
    def open(self, environment: str, task_json: str, deadline_s: float = 0.0, max_turns: int = 0) -> Opened:
        env = self.environments.get(environment)
        if env is None:
            raise NotFound(f"unknown environment {environment!r}; environments: {', '.join(self.environments)}")
        c = self.config
        if not 0 <= deadline_s <= c.max_deadline_s:
            raise InvalidArgument("deadline_s", f"must be in (0, {c.max_deadline_s:g}] seconds or 0 (default), got {deadline_s}")
        if not 0 <= max_turns <= c.max_turns:
            raise InvalidArgument("max_turns", f"must be in [1, {c.max_turns}] or 0 (default), got {max_turns}")
        try:
            record = json.loads(task_json)
        except ValueError as exc:
            raise InvalidArgument("task_json", f"is not JSON: {exc}") from None
        try:
            task = env.parse(record)
        except InvalidArgument as exc:
            raise InvalidArgument(f"task_json.{exc.field}" if exc.field != "task_json" else "task_json", exc.message) from None
        except Exception as exc:  # a shape the parser did not foresee: still the record's fault, said plainly
            log.exception("task parser failed", extra={"environment": environment})
            raise InvalidArgument("task_json", f"is not a {environment} task: {type(exc).__name__}: {exc}") from None
        deadline_s, max_turns = deadline_s or c.default_deadline_s, max_turns or c.default_turns
        with self._lock:
            if len(self._episodes) >= c.max_open_episodes:
                raise ResourceExhausted(f"{len(self._episodes)} episodes open (max_open_episodes); close some or retry later")
            episode_id = f"{environment}-{uuid.uuid4().hex}"
            self._episodes[episode_id] = None  # reserve the slot while the environment opens
        try:
            state = env.open(task)
        except BaseException:
            with self._lock:
                self._episodes.pop(episode_id, None)
            raise
        episode = Episode(episode_id, env, state, time.monotonic() + deadline_s, max_turns)
        with self._lock:
            self._episodes[episode_id] = episode
            metrics.OPEN_EPISODES.set(len(self._episodes))
        metrics.EPISODES_OPENED.labels(environment).inc()
        return Opened(episode_id, state.messages, state.tools, deadline_s, max_turns)

    def step(self, episode_id: str, text: str) -> StepResult:
        episode = self._get(episode_id)
        if not episode.lock.acquire(blocking=False):
            raise FailedPrecondition(f"episode {episode_id} is in another step: one turn at a time")
        try:
            return self._step(episode, text)
        finally:
            episode.lock.release()

    def close(self, episode_id: str) -> Closed:
        episode = self._get(episode_id)
        with episode.lock:  # a step in flight ends within its budget
            with self._lock:
                if self._episodes.get(episode_id) is not episode:
                    raise NotFound(f"episode {episode_id} is already closed")
                del self._episodes[episode_id]
            if episode.verdict == "running":
                self._end(episode, "closed", None)
            self._free(episode, "closed by the caller")
        return Closed(episode.reward, episode.verdict, episode.reason, episode.turns, episode.env_seconds)

    def open_count(self) -> int:
        with self._lock:
            return sum(1 for e in self._episodes.values() if e is not None)

    # -- one turn -----------------------------------------------------------------------------
    def _step(self, ep: Episode, text: str) -> StepResult:
        if ep.verdict != "running":
            raise FailedPrecondition(f"episode {ep.id} has ended ({ep.verdict}: {ep.reason}); close it")
        start = time.monotonic()
        if start >= ep.deadline:
            self._end(ep, "limit_deadline", None)
            return self._result(ep, [], 0, 0.0)
        ep.turns += 1
        metrics.TURNS.labels(ep.env.name).inc()
        answer = answer_part(text)
        calls = split_tool_calls(answer)
        if not calls:
            self._end(ep, "ok", answer)
            return self._result(ep, [], 0, time.monotonic() - start)
        messages, errors = self._run_calls(ep, calls)
        seconds = time.monotonic() - start
        ep.env_seconds += seconds
        metrics.TURN_SECONDS.labels(ep.env.name).observe(seconds)
        if ep.verdict == "running":
            if ep.env_seconds >= self.config.max_env_seconds:
                self._end(ep, "limit_env_seconds", None)
            elif time.monotonic() >= ep.deadline:
                self._end(ep, "limit_deadline", None)
            elif ep.turns >= ep.max_turns:
                self._end(ep, "limit_turns", None)
        return self._result(ep, messages, errors, seconds)

    def _run_calls(self, ep: Episode, calls: list[dict | MalformedToolCall]) -> tuple[list[dict], int]:
        offered = {t.get("name") for t in ep.state.tools}
        messages, errors = [], 0
        for i, call in enumerate(calls):
            if isinstance(call, MalformedToolCall):
                errors += 1
                metrics.TOOL_ERRORS.labels(ep.env.name, "malformed").inc()
                messages.append(self._tool_message(f"Error: {call}"))
                continue
            name = call["name"]
            budget = min(ep.env.timeout_s(name), ep.deadline - time.monotonic(),
                         self.config.max_env_seconds - ep.env_seconds)
            if i >= self.config.max_calls_per_turn:
                out = f"Error: call {i + 1} not run: at most {self.config.max_calls_per_turn} tool calls per turn"
            elif name not in offered:
                out = f"Error: unknown tool {name!r}; tools: {', '.join(sorted(offered))}"
            elif budget <= 0:
                out = f"Error: {name} not run: the episode has no time left"
            else:
                try:
                    out = ep.env.call(ep.state, name, call["arguments"], budget)
                except ToolError as exc:
                    out = f"Error: {exc}"
                except Exception as exc:  # the environment failed, not the model: the episode is masked out
                    log.exception("environment failed in a tool call", extra={"episode": ep.id, "tool": name})
                    self._fail(ep, f"{name} failed: {type(exc).__name__}: {exc}")
                    return messages, errors
            if out.startswith("Error: "):
                errors += 1
                metrics.TOOL_ERRORS.labels(ep.env.name, name if name in offered else "unknown").inc()
            messages.append(self._tool_message(out))
        return messages, errors

    def _tool_message(self, content: str) -> dict:
        return {"role": "tool", "content": truncate(content, self.config.tool_output_chars)}

    def _end(self, ep: Episode, verdict: str, final: str | None) -> None:
        """End a running episode with `verdict`, scoring its state (an environment failure: `error`)."""
        try:
            score = ep.env.score(ep.state, final)
        except Exception as exc:
            if not isinstance(exc, EnvironmentFailure):
                log.exception("environment failed to score", extra={"episode": ep.id})
            self._fail(ep, f"scoring failed: {type(exc).__name__}: {exc}")
            return
        ep.verdict, ep.reward = verdict, float(score.reward)
        ep.reason = score.reason if verdict in ("ok", "closed") else f"{verdict.replace('_', ' ')} reached; {score.reason}"

    @staticmethod
    def _fail(ep: Episode, reason: str) -> None:
        ep.verdict, ep.reward, ep.reason = "error", 0.0, reason

    @staticmethod
    def _result(ep: Episode, messages: list[dict], errors: int, seconds: float) -> StepResult:
        return StepResult(messages, ep.verdict != "running", ep.reward, ep.verdict, ep.reason, errors, seconds, ep.turns)

    # -- table, expiry, cleanup -----------------------------------------------------------------
    def _get(self, episode_id: str) -> Episode:
        """The open episode, or NOT_FOUND worded for the caller: an id this process never opened reads
        `no episode …` (a restarted service: the rollout loop retries it on a fresh episode), one it ended
        reads `episode … has been …` (the service's own end: not retried)."""
        if not episode_id:
            raise InvalidArgument("episode_id", "is required (the id OpenEpisode returned)")
        with self._lock:
            episode = self._episodes.get(episode_id)
            if episode is None:
                why = self._ended.get(episode_id)
                if why is not None:
                    raise NotFound(f"episode {episode_id} has been {why}")
                raise NotFound(f"no episode {episode_id!r}")
            return episode

    def _free(self, ep: Episode, why: str) -> None:
        try:
            ep.env.close(ep.state)
        except Exception:
            log.exception("environment failed to clean up", extra={"episode": ep.id})
        with self._lock:
            self._ended[ep.id] = why
            while len(self._ended) > _TOMBSTONES:
                self._ended.popitem(last=False)
            metrics.OPEN_EPISODES.set(len(self._episodes))
        metrics.EPISODES_CLOSED.labels(ep.env.name, ep.verdict).inc()

    def reap(self) -> int:
        """Close every episode past its deadline that is not in a step; the number closed."""
        now, closed = time.monotonic(), 0
        with self._lock:
            expired = [e for e in self._episodes.values() if e is not None and e.deadline <= now]
        for ep in expired:
            if not ep.lock.acquire(blocking=False):
                continue  # in a step: its calls end by the deadline, the next sweep takes it
            try:
                with self._lock:
                    if self._episodes.get(ep.id) is not ep:
                        continue
                    del self._episodes[ep.id]
                if ep.verdict == "running":
                    self._end(ep, "limit_deadline", None)
                self._free(ep, f"closed at its deadline ({ep.verdict})")
                closed += 1
            finally:
                ep.lock.release()
        return closed

    def _reap_loop(self) -> None:
        while not self._stop.wait(self.config.reap_interval_s):
            try:
                self.reap()
            except Exception:
                log.exception("episode reaper failed")

    def close_all(self) -> None:
        """Stop the reaper, close every episode (freeing what each started) and the sandbox if it made it."""
        self._stop.set()
        with self._lock:
            ids = [i for i, e in self._episodes.items() if e is not None]
        for episode_id in ids:
            try:
                self.close(episode_id)
            except NotFound:
                pass
        if self._owns_sandbox:
            self.sandbox.close()
