"""The teacher core: per-domain teachers, request validation, scoring and metrics.

`TeacherCore` holds one loaded teacher per domain (several domains may live in one process),
validates every ScoreTokens request (each error names the request field), enforces that all its
teachers share the student's vocabulary, and hands clean arrays to the domain's backend
(services/teacher/backends.py). It knows nothing of gRPC; server.py translates messages.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from prometheus_client import Counter, Histogram

from services.common.checksum import verify_dir
from services.common.cores import CorePool
from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.weightfetch import WeightSource
from services.teacher.backends import TeacherModel, build_teacher, read_spec
from services.teacher.config import TeacherConfig
from services.teacher.scoring import Scores

MAX_TOP_K = 64

TOKENS = Counter("cascade_teacher_tokens_scored_total", "Completion tokens scored, by domain.", ["domain"])
SEQUENCES = Counter("cascade_teacher_sequences_scored_total", "Completions scored, by domain.", ["domain"])
BATCH_TOKENS = Histogram(
    "cascade_teacher_batch_tokens", "Padded tokens per forward batch.", ["domain"],
    buckets=(64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536),
)
LOAD_SECONDS = Histogram("cascade_teacher_load_seconds", "Seconds to verify and load a teacher checkpoint.")


@dataclass
class Teacher:
    """A domain's loaded teacher."""

    domain: str
    uri: str
    model: TeacherModel
    version: int
    lock: threading.Lock
    sha256: str = ""


@dataclass
class ScoreResult:
    scores: list[Scores]
    weight_version: int


def check_rows(flat: np.ndarray, lengths: Sequence[int], vocab_size: int, field: str) -> None:
    """Raise InvalidArgument naming `field[row]` when a token id lies outside [0, vocab_size)."""
    bad = np.flatnonzero((flat < 0) | (flat >= vocab_size))
    if bad.size:
        row = int(np.searchsorted(np.cumsum(lengths), bad[0], side="right"))
        raise InvalidArgument(f"{field}[{row}]", f"token id {int(flat[bad[0]])} is outside the teacher's vocabulary [0, {vocab_size})")


def check_options(top_k: int, temperature: float) -> None:
    if not 0 <= top_k <= MAX_TOP_K:
        raise InvalidArgument("top_k", f"must be in [0, {MAX_TOP_K}], got {top_k}")
    if not math.isfinite(temperature) or temperature <= 0:
        raise InvalidArgument("temperature", f"must be a finite number > 0, got {temperature}")


def check_structure(p_lens: Sequence[int], c_lens: Sequence[int], prompt_index: Sequence[int], context: int, max_tokens: int) -> None:
    """Batch shape checks: non-empty, prompt_index aligned and in range, sequences within the context."""
    if not c_lens:
        raise InvalidArgument("completion_ids", "is empty; send at least one completion")
    if len(prompt_index) != len(c_lens):
        raise InvalidArgument("prompt_index", f"has {len(prompt_index)} entries for {len(c_lens)} completions")
    total = sum(c_lens) + sum(p_lens)
    if total > max_tokens:
        raise InvalidArgument("completion_ids", f"request carries {total} tokens, above max_request_tokens={max_tokens}; split it")
    for i, p in enumerate(prompt_index):
        if p >= len(p_lens):
            raise InvalidArgument(f"prompt_index[{i}]", f"is {p} but prompt_ids has {len(p_lens)} rows")
        if p_lens[p] == 0:
            raise InvalidArgument(f"prompt_ids[{p}]", "is empty; a prompt needs at least one token")
        if context and p_lens[p] + c_lens[i] > context:
            raise InvalidArgument(f"completion_ids[{i}]", f"prompt ({p_lens[p]}) + completion ({c_lens[i]}) tokens exceed the teacher's context of {context}")


class TeacherCore:
    """Domain -> Teacher, with loading, listing and scoring."""

    def __init__(self, config: TeacherConfig):
        self.config = config
        self.teachers: dict[str, Teacher] = {}
        self.vocab_size = config.vocab_size
        self._load_lock = threading.Lock()
        self.weights = WeightSource(config)
        self.cores = CorePool.off() if config.backend == "vllm" else CorePool.from_settings(config)  # vLLM: its own threads

    def load_teacher(self, domain: str, uri: str, sha256: str = "") -> tuple[Teacher, float]:
        """Load (or replace) the teacher of `domain`; return it and the seconds it took."""
        start = time.perf_counter()
        if not domain:
            raise InvalidArgument("domain", "is empty; name the domain this teacher serves")
        directory = self.weights.locate(uri, "uri", sha256=sha256)  # here, or fetched from the trainer
        spec = read_spec(directory, self.config.device)
        if sha256:
            verify_dir(directory, sha256)
        with self._load_lock:
            if self.vocab_size is not None and spec.vocab_size != self.vocab_size:
                raise FailedPrecondition(
                    f"teacher {directory} has vocab_size {spec.vocab_size}, but this service scores for a "
                    f"vocabulary of {self.vocab_size}: teacher and student must share a tokenizer"
                )
            previous = self.teachers.get(domain)
            model = self._swapped(previous, directory) or build_teacher(directory, self.config)
            version = previous.version + 1 if previous else 0
            if previous is not None and previous.model is not model:
                previous.model.close()
            self.teachers[domain] = Teacher(domain, str(uri), model, version, threading.Lock(), sha256)
            self.vocab_size = spec.vocab_size
            self._remember()
        seconds = time.perf_counter() - start
        LOAD_SECONDS.observe(seconds)
        return self.teachers[domain], seconds

    def _swapped(self, previous: Teacher | None, directory) -> TeacherModel | None:
        """The domain's loaded model with `directory`'s weights swapped in (a backend that reloads in
        place, same shapes, no scoring running), or None: a fresh one is built."""
        if previous is None or previous.model.name != self.config.backend:
            return None
        with previous.lock:
            return previous.model if previous.model.reload(directory) else None

    def _remember(self) -> None:
        """Write {domain: {uri, sha256}} of the loaded teachers to config.state_file (atomically)."""
        path = self.config.state_file
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}")
        tmp.write_text(json.dumps({d: {"uri": t.uri, "sha256": t.sha256} for d, t in self.teachers.items()}))
        os.replace(tmp, path)

    def restore(self) -> list[str]:
        """Reload the teachers recorded in config.state_file (a restarted replica); return their domains."""
        path = self.config.state_file
        if path is None or not path.exists():
            return []
        for domain, entry in sorted(json.loads(path.read_text()).items()):
            self.load_teacher(domain, entry["uri"], entry.get("sha256", ""))
        return sorted(self.teachers)

    def teacher(self, domain: str) -> Teacher:
        if domain not in self.teachers:
            raise InvalidArgument("domain", f"{domain!r} is not served here (served: {sorted(self.teachers) or 'none'})")
        return self.teachers[domain]

    def score(
        self,
        domain: str,
        prompts: Sequence[np.ndarray],
        completions: Sequence[np.ndarray],
        prompt_index: Sequence[int],
        top_k: int = 0,
        temperature: float = 1.0,
    ) -> ScoreResult:
        """log pi_teacher of every completion token (and optionally the top-k) under `domain`'s teacher."""
        teacher = self.teacher(domain)
        check_options(top_k, temperature)
        p_lens, c_lens = [len(p) for p in prompts], [len(c) for c in completions]
        check_structure(p_lens, c_lens, prompt_index, teacher.model.spec.max_context, self.config.max_request_tokens)
        vocab = teacher.model.spec.vocab_size
        for rows, field in ((prompts, "prompt_ids"), (completions, "completion_ids")):
            lens = [len(r) for r in rows]
            check_rows(np.concatenate(rows) if rows else np.zeros(0, np.int32), lens, vocab, field)
        with teacher.lock, self.cores.lease():  # the host's free cores for this batch
            scores, costs = teacher.model.score(prompts, completions, prompt_index, top_k, temperature)
        TOKENS.labels(domain).inc(sum(c_lens))
        SEQUENCES.labels(domain).inc(len(c_lens))
        for cost in costs:
            BATCH_TOKENS.labels(domain).observe(cost)
        return ScoreResult(scores, teacher.version)

    def close(self) -> None:
        """Close every served teacher's model (vLLM: its engine-core process); none is served after."""
        for domain in sorted(self.teachers):
            teacher = self.teachers.pop(domain)
            with teacher.lock:
                teacher.model.close()

    def list_teachers(self) -> list[Teacher]:
        return [self.teachers[d] for d in sorted(self.teachers)]

    @staticmethod
    def info(teacher: Teacher) -> dict:
        spec = teacher.model.spec
        return {
            "model": spec.model, "backend": teacher.model.name, "weight_version": teacher.version,
            "vocab_size": spec.vocab_size, "architecture": spec.architecture, "device": spec.device,
        }
