"""RewardCore: scores batches of (task record, response) with each domain's verifier.

It parses and validates the records, admits the batch against a bounded queue (back-pressure:
`ResourceExhausted` when full), scores items in parallel threads — pure verifiers in the deadline
pool's worker processes, code and SWE through the sandbox, rlhf through the reward model — and
turns every failure into an explicit verdict (`timeout`, `error`), never a silent 0. The model's
thinking (text up to the last `</think>`) is dropped before verification. Results are plain data,
identical whether the caller is the gRPC servicer or the CLI. No gRPC imports here.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from services.common.errors import InvalidArgument, ResourceExhausted
from services.common.sandbox.isolation import Limits
from services.common.sandbox.sandbox import RunResult, Sandbox
from services.common.tasks import TaskRecord
from services.reward import metrics
from services.reward.config import RewardConfig
from services.reward.verifiers import UNSCORED, VERIFIERS
from services.reward.verifiers.base import Context, Outcome, VerifyOptions, error, invalid, timeout
from services.reward.workers import DeadlinePool

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScoredItem:
    """One result: the verifier's outcome plus where and how long."""

    id: str
    domain: str
    outcome: Outcome
    seconds: float


def strip_thinking(response: str) -> str | None:
    """The answer part of a response: after the last `</think>`; None when a `<think>` never closes."""
    if "</think>" in response:
        return response.rsplit("</think>", 1)[1]
    if "<think>" in response:
        return None
    return response


def as_float32(x: float) -> float:
    """The reward as the wire carries it (float32), so in-process and gRPC results are identical."""
    return float(np.float32(x))


class RewardCore:
    """The reward service's one core object (thread-safe)."""

    def __init__(self, config: RewardConfig):
        self.config = config
        self.options = VerifyOptions(
            math_last_box=config.math_last_box, if_reward=config.if_reward, if_mode=config.if_mode,
            code_timeout_s=config.sandbox_timeout_s,
        )
        limits = Limits(
            cpu_s=max(1, int(config.sandbox_timeout_s + 0.999)), memory_mb=config.sandbox_memory_mb,
            nproc=config.sandbox_nproc, fsize_mb=config.sandbox_fsize_mb, nofile=config.sandbox_nofile,
            wall_s=config.sandbox_timeout_s,
        )
        self.sandbox = Sandbox(
            workers=config.sandbox_workers, limits=limits, python=config.sandbox_python, root=config.sandbox_root,
            base_uid=config.sandbox_base_uid, allow_unisolated=config.allow_unisolated, on_run=_count_run,
        )
        if self.sandbox.isolation != "namespace":
            action = "running code WITHOUT isolation" if config.allow_unisolated else "code and swe items get `error`"
            log.error("SANDBOX NOT ISOLATED: %s; %s", self.sandbox.problem, action)
        self.pool = DeadlinePool(config.verify_workers)
        self.reward_model = None
        if config.reward_model is not None:
            self.load_reward_model(str(config.reward_model))
        self._threads = ThreadPoolExecutor(config.max_parallel, thread_name_prefix="reward")
        self._pending = 0
        self._lock = threading.Lock()

    def load_reward_model(self, uri: str, sha256: str = "") -> str:
        """Load (or replace) the rlhf reward model; with `sha256`, the directory is verified first. Kind
        genrm: a generative judge instead (a causal-LM folder here, or the model an endpoint serves)."""
        from services.common.checksum import verify_dir
        from services.common.modelio import resolve_uri
        from services.reward.rm import RewardModel

        c = self.config
        if c.reward_model_kind == "genrm" and c.genrm_endpoint:
            from services.reward.genrm import EndpointJudge, load_template

            local = Path(uri).is_dir()  # a local copy of the judge's folder gives its chat template
            tokenizer = None
            if local:
                from services.common.modelio import load_tokenizer

                tokenizer = load_tokenizer(uri)
            model = EndpointJudge(c.genrm_endpoint, uri, load_template(c.genrm_template), tokenizer, c.genrm_api_key)
            self.reward_model = model
            log.info("reward judge attached", extra={"uri": model.path})
            return model.path
        directory = resolve_uri(uri, "uri")
        if sha256:
            verify_dir(directory, sha256)
        if c.reward_model_kind == "genrm":
            from services.reward.genrm import LocalJudge, load_template

            model = LocalJudge(directory, load_template(c.genrm_template), c.reward_model_device,
                               c.reward_model_dtype, c.reward_model_max_length)
        else:
            model = RewardModel(directory, c.reward_model_device, c.reward_model_dtype, c.reward_model_max_length)
        self.reward_model = model  # one reference swap: items in flight finish with the old model
        log.info("reward model loaded", extra={"uri": str(directory)})
        return str(directory)

    def warm_up(self) -> None:
        """Start the verifier workers (imports take a second or two); call before serving."""
        self.pool.warm_up()

    def score(self, items: list[tuple[str | TaskRecord, str]], timeout_s: float | None = None) -> list[ScoredItem]:
        """Score (task, response) pairs in order; `timeout_s` bounds the whole batch (gRPC deadline).

        Pairs that repeat within the batch (the same record and the same response: a group's samples
        that agree, most of an evaluation's code answers once the model has learned) are verified once
        and share the result (`first_of`): a verifier is a function of the record and the response, and
        a program whose result changes from run to run is judged by one run either way."""
        tasks = [self._parse(i, task) for i, (task, _) in enumerate(items)]
        for i, (_, response) in enumerate(items):
            if not isinstance(response, str):
                raise InvalidArgument(f"items[{i}].response", f"must be a string, got {type(response).__name__}")
        deadline = time.monotonic() + timeout_s if timeout_s is not None else None
        first = first_of([(task if isinstance(task, str) else tasks[i].model_dump_json(), response)
                          for i, (task, response) in enumerate(items)])
        self._admit(len(items))
        try:
            futures = {i: self._threads.submit(self.score_one, tasks[i], items[i][1], deadline) for i in sorted(set(first))}
            results = {i: f.result() for i, f in futures.items()}
        finally:
            self._release(len(items))
        for i, j in enumerate(first):
            if i != j:  # a repeat: counted as scored, its seconds are its first's
                metrics.VERDICTS.labels(results[j].domain, results[j].outcome.verdict).inc()
        return [results[j] for j in first]

    def score_one(self, task: TaskRecord, response: str, deadline: float | None = None) -> ScoredItem:
        """Score one item; never raises for a bad response or a failing verifier."""
        start = time.perf_counter()
        outcome = self._verify(task, response, deadline)
        outcome = Outcome(as_float32(outcome.reward), outcome.verdict, outcome.reason, outcome.checks)
        seconds = time.perf_counter() - start
        metrics.VERDICTS.labels(task.domain, outcome.verdict).inc()
        metrics.SCORE_SECONDS.labels(task.domain).observe(seconds)
        return ScoredItem(task.id, task.domain, outcome, seconds)

    def _verify(self, task: TaskRecord, response: str, deadline: float | None) -> Outcome:
        answer = strip_thinking(response)
        if answer is None:
            return invalid("the response ends inside <think> (no answer)")
        budget = self.config.verify_timeout_s
        if deadline is not None:
            budget = min(budget, deadline - time.monotonic())
            if budget <= 0:
                return timeout("request deadline passed before this item ran")
        verifier = VERIFIERS[task.domain]
        try:
            if verifier.where == "pure":
                return self.pool.call(verifier.fn, task, answer, self.options, budget)
            ctx = Context(options=self.options, sandbox=self.sandbox, reward_model=self.reward_model)
            return verifier.fn(task, answer, ctx)
        except TimeoutError as exc:
            return timeout(str(exc))
        except InvalidArgument as exc:
            return error(f"bad task record: {exc}")
        except Exception as exc:  # a verifier bug must mask the sample, not crash the batch
            log.exception("verifier failed", extra={"domain": task.domain, "id": task.id})
            return error(f"verifier failed: {type(exc).__name__}: {exc}")

    def _parse(self, i: int, task: str | TaskRecord) -> TaskRecord:
        if not isinstance(task, TaskRecord):
            try:
                task = TaskRecord.from_json(task)
            except InvalidArgument as exc:
                field = "task_json" if exc.field == "task_json" else f"task_json.{exc.field}"
                raise InvalidArgument(f"items[{i}].{field}", exc.message) from None
        if task.domain in UNSCORED:
            raise InvalidArgument(f"items[{i}].task_json.domain", f"{task.domain!r} is not scored here: {UNSCORED[task.domain]}")
        return task

    def _admit(self, n: int) -> None:
        with self._lock:
            if self._pending + n > self.config.max_pending_items:
                raise ResourceExhausted(
                    f"reward queue full: {self._pending} items pending, {n} more would pass the limit "
                    f"{self.config.max_pending_items} (max_pending_items); retry later"
                )
            self._pending += n
            metrics.QUEUE_DEPTH.set(self._pending)

    def _release(self, n: int) -> None:
        with self._lock:
            self._pending -= n
            metrics.QUEUE_DEPTH.set(self._pending)

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
        self.pool.close()
        self.sandbox.close()


def first_of(keys: list) -> list[int]:
    """For each position, the first position holding an equal key: [a, b, a, a, c] -> [0, 1, 0, 0, 4]."""
    seen: dict = {}
    return [seen.setdefault(k, i) for i, k in enumerate(keys)]


def _count_run(result: RunResult) -> None:
    outcome = "timeout" if result.timed_out else "ok" if result.returncode == 0 else "failed"
    metrics.SANDBOX_RUNS.labels(outcome).inc()
