"""Client of the teacher services: route each sample to its domain's teacher, fail over across replicas.

`TeacherClient({"math": "h1:5001,h2:5001", "if": "h3:5001"})` keeps one ReplicaClient per domain
(deadlines, retries, fail-over to the next replica on UNAVAILABLE; services.common.grpc_client).
`score_samples` takes samples of mixed domains, sends one request per domain (in parallel), with
the prompts of a domain de-duplicated so the G samples of a group share one prompt row (the
server then runs that prompt once), and returns the scores in the samples' order. This module
knows nothing of models; it speaks only the TeacherService contract.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from services.common import codec
from services.common.errors import InvalidArgument
from services.common.grpc_client import ClientOptions, ReplicaClient
from services.common.pb import teacher_pb2, teacher_pb2_grpc


@dataclass
class TeacherScores:
    """Scores of a batch, one entry per completion."""

    logprobs: list[np.ndarray]
    """[len] float32 per completion."""
    topk_ids: list[np.ndarray]
    """[len, k] int32 per completion (k = 0 when top-k was not asked)."""
    topk_logprobs: list[np.ndarray]
    """[len, k] float32 per completion."""
    weight_versions: dict[str, int]
    """Weight version of the teacher that scored, per domain."""


@dataclass(frozen=True)
class Sample:
    """One completion to score: its domain, its prompt ids and its completion ids."""

    domain: str
    prompt_ids: Sequence[int]
    completion_ids: Sequence[int]


def build_request(domain: str, prompts, completions, prompt_index, top_k: int = 0, temperature: float | None = None) -> teacher_pb2.ScoreTokensRequest:
    return teacher_pb2.ScoreTokensRequest(
        domain=domain,
        prompt_ids=codec.encode(prompts, "int32"),
        completion_ids=codec.encode(completions, "int32"),
        prompt_index=list(prompt_index),
        top_k=top_k,
        temperature=temperature,
    )


def parse_response(reply: teacher_pb2.ScoreTokensResponse, domain: str, top_k: int) -> TeacherScores:
    logprobs = codec.decode(reply.logprobs, "logprobs", "float32")
    if top_k:
        ids = [r.reshape(-1, top_k) for r in codec.decode(reply.topk_ids, "topk_ids", "int32")]
        vals = [r.reshape(-1, top_k) for r in codec.decode(reply.topk_logprobs, "topk_logprobs", "float32")]
    else:
        ids = [np.zeros((len(r), 0), np.int32) for r in logprobs]
        vals = [np.zeros((len(r), 0), np.float32) for r in logprobs]
    return TeacherScores(logprobs, ids, vals, {domain: reply.weight_version})


class TeacherClient:
    """Per-domain replica sets of teacher services."""

    def __init__(self, routes: Mapping[str, str | Sequence[str]], options: ClientOptions | None = None):
        if not routes:
            raise InvalidArgument("teachers", "no domain -> address routes given")
        self.clients = {domain: ReplicaClient(addresses, teacher_pb2_grpc.TeacherServiceStub, options) for domain, addresses in routes.items()}

    def client(self, domain: str) -> ReplicaClient:
        if domain not in self.clients:
            raise InvalidArgument("domain", f"no teacher is configured for {domain!r} (configured: {sorted(self.clients)})")
        return self.clients[domain]

    def score(self, domain: str, prompts, completions, prompt_index, top_k: int = 0, temperature: float | None = None, timeout: float | None = None) -> TeacherScores:
        """One ScoreTokens call to `domain`'s replicas (fail-over on UNAVAILABLE)."""
        request = build_request(domain, prompts, completions, prompt_index, top_k, temperature)
        return parse_response(self.client(domain).call("ScoreTokens", request, timeout=timeout), domain, top_k)

    def score_samples(self, samples: Sequence[Sample], top_k: int = 0, temperature: float | None = None, timeout: float | None = None) -> TeacherScores:
        """Score samples of mixed domains; results are in the samples' order."""
        by_domain: dict[str, list[int]] = {}
        for i, s in enumerate(samples):
            self.client(s.domain)
            by_domain.setdefault(s.domain, []).append(i)

        def one(domain: str) -> tuple[list[int], TeacherScores]:
            idx = by_domain[domain]
            prompts, prompt_index, seen = [], [], {}
            for i in idx:
                key = np.asarray(samples[i].prompt_ids, dtype=np.int32).tobytes()
                if key not in seen:
                    seen[key] = len(prompts)
                    prompts.append(np.frombuffer(key, dtype=np.int32))
                prompt_index.append(seen[key])
            completions = [samples[i].completion_ids for i in idx]
            return idx, self.score(domain, prompts, completions, prompt_index, top_k, temperature, timeout)

        n = len(samples)
        out = TeacherScores([None] * n, [None] * n, [None] * n, {})  # type: ignore[list-item]
        with ThreadPoolExecutor(max_workers=max(1, len(by_domain))) as pool:
            for idx, scores in pool.map(one, list(by_domain)):
                for j, i in enumerate(idx):
                    out.logprobs[i], out.topk_ids[i], out.topk_logprobs[i] = scores.logprobs[j], scores.topk_ids[j], scores.topk_logprobs[j]
                out.weight_versions.update(scores.weight_versions)
        return out

    def close(self) -> None:
        for c in self.clients.values():
            c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
