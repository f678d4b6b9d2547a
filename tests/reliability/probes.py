"""Probes against running services: malformed and oversized gRPC bodies, and a concurrent load.

`start_services` runs the four services as supervised processes on loopback with deliberate
bounds (a 1 MiB message limit, a few concurrent calls for policy and teacher, a small reward
queue). `fuzz_service` sends raw bytes through a generic `channel.unary_unary` (identity
serializers): random bytes, mutated valid requests, an empty body and a body above the message
limit, and records the status codes. `load_reward` fires many concurrent Score calls and measures
latency, back-pressure and the service's RSS. Shared by tests/reliability and bench/reliability.py.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import numpy as np
import psutil
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common import codec
from services.common.pb import policy_pb2, reward_pb2, teacher_pb2, trainer_pb2
from services.common.supervisor import ProcessSpec, Supervisor
from services.orchestrator.stack import local_stack

MESSAGE_MB = 1
BOUNDS = {
    "policy": {"CASCADE_POLICY_MAX_MESSAGE_MB": str(MESSAGE_MB), "CASCADE_POLICY_MAX_CONCURRENT_RPCS": "2",
               "CASCADE_POLICY_MAX_REQUEST_SAMPLES": "64"},
    "teacher": {"CASCADE_TEACHER_MAX_MESSAGE_MB": str(MESSAGE_MB), "CASCADE_TEACHER_MAX_CONCURRENT_RPCS": "2"},
    "reward": {"CASCADE_REWARD_MAX_MESSAGE_MB": str(MESSAGE_MB), "CASCADE_REWARD_MAX_PENDING_ITEMS": "8",
               "CASCADE_REWARD_MAX_PARALLEL": "2", "CASCADE_REWARD_VERIFY_WORKERS": "1"},
    "trainer": {"CASCADE_TRAINER_MAX_MESSAGE_MB": str(MESSAGE_MB)},
}
SERVICES = {"policy": "cascade.v1.PolicyService", "teacher": "cascade.v1.TeacherService",
            "reward": "cascade.v1.RewardService", "trainer": "cascade.v1.TrainerService"}
MCQA = '{"domain": "mcqa", "messages": [{"role": "user", "content": "A or B?"}], "ground_truth": "A"}'


def start_services(home: Path, model: Path) -> tuple[Supervisor, dict[str, ProcessSpec]]:
    """policy, teacher (domain mcqa loaded), reward, trainer, bounded as in BOUNDS."""
    built = local_stack(home, model)
    specs = {}
    for spec in built.specs:
        if spec.name in BOUNDS:
            extra = dict(BOUNDS[spec.name])
            if spec.name == "teacher":
                extra["CASCADE_TEACHER_TEACHERS"] = '{"mcqa": "%s"}' % Path(model).resolve()
            specs[spec.name] = ProcessSpec(spec.name, spec.argv, {**spec.env, **extra}, spec.grpc_address,
                                           ready_timeout=300)
    sup = Supervisor(Path(home) / "logs")
    sup.start_all(list(specs.values()))
    return sup, specs


def health(address: str) -> str:
    with grpc.insecure_channel(address) as ch:
        reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def valid_requests(vocab: int = 100) -> dict[str, bytes]:
    """One well-formed request per main method, serialized (the seeds of the mutations)."""
    ids = codec.encode([[5, 6, 7], [8, 9]], "int32")
    return {
        "Generate": policy_pb2.GenerateRequest(prompts=[policy_pb2.Prompt(token_ids=np.array([5, 6], "<i4").tobytes())],
                                               n=2, sampling=policy_pb2.SamplingParams(max_tokens=2)).SerializeToString(),
        "ScoreTokens": teacher_pb2.ScoreTokensRequest(domain="mcqa", prompt_ids=codec.encode([[5, 6]], "int32"),
                                                      completion_ids=ids, prompt_index=[0, 0]).SerializeToString(),
        "Score": reward_pb2.ScoreRequest(items=[reward_pb2.ScoreItem(task_json=MCQA, response="A")]).SerializeToString(),
        "TrainStep": trainer_pb2.TrainStepRequest(step_id="fuzz", loss="sft", batch=trainer_pb2.TrainBatch(
            input_ids=ids, loss_mask=codec.encode([[0, 1, 1], [0, 1]], "int32"))).SerializeToString(),
    }


def mutate(data: bytes, rng: random.Random) -> bytes:
    """Flip, drop or insert a few bytes."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(3)
        if op == 0 and b:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        elif op == 1 and b:
            del b[rng.randrange(len(b))]
        else:
            b.insert(rng.randrange(len(b) + 1), rng.randrange(256))
    return bytes(b)


@dataclass
class FuzzResult:
    service: str
    sent: int = 0
    codes: Counter = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)
    """INTERNAL / UNKNOWN answers: an exception nobody mapped to a status (a bug)."""
    health_after: str = ""
    pid_before: int = 0
    pid_after: int = 0


def fuzz_service(name: str, address: str, seed: int = 0, random_bodies: int = 12, mutations: int = 24,
                 pid: int = 0) -> FuzzResult:
    """Throw malformed and oversized bodies at every unary method of service `name`."""
    rng = random.Random(seed)
    out = FuzzResult(name, pid_before=pid)
    from google.protobuf import descriptor_pool

    service = descriptor_pool.Default().FindServiceByName(SERVICES[name])
    seeds = valid_requests()
    limit = (MESSAGE_MB + 8) * 1024 * 1024
    options = [("grpc.max_send_message_length", limit), ("grpc.max_receive_message_length", limit)]
    with grpc.insecure_channel(address, options=options) as ch:
        for method in service.methods:
            path = f"/{SERVICES[name]}/{method.name}"
            if method.server_streaming:
                call = ch.unary_stream(path, request_serializer=None, response_deserializer=None)
                send = lambda body, c=call: list(c(body, timeout=30))  # noqa: E731
            else:
                call = ch.unary_unary(path, request_serializer=None, response_deserializer=None)
                send = lambda body, c=call: c(body, timeout=30)  # noqa: E731
            bodies = [bytes(rng.randrange(256) for _ in range(rng.randint(1, 64))) for _ in range(random_bodies)]
            if method.name in seeds:
                bodies += [mutate(seeds[method.name], rng) for _ in range(mutations)]
            bodies += [b"", b"\xff" * (MESSAGE_MB * 1024 * 1024 + 1024)]
            for body in bodies:
                out.sent += 1
                try:
                    send(body)
                    out.codes["OK"] += 1
                except grpc.RpcError as err:
                    code, details = err.code(), err.details() or ""
                    out.codes[code.name] += 1
                    if code in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL):
                        out.unexpected.append(f"{method.name}: {code.name}: {details[:200]}")
    out.health_after = health(address)
    return out


@dataclass
class LoadResult:
    requests: int
    concurrency: int
    codes: Counter
    latencies: list[float]
    rss_before_mb: float
    rss_peak_mb: float
    rss_after_mb: float

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.latencies, q)) if self.latencies else float("nan")


def load_reward(address: str, pid: int, requests: int = 200, concurrency: int = 32, items: int = 4) -> LoadResult:
    """`requests` Score calls of `items` mcqa items, `concurrency` at a time, straight to one address
    (no client retries: back-pressure must show). RSS of the service process sampled throughout."""
    proc = psutil.Process(pid)
    rss = lambda: sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)]) / 2**20  # noqa: E731
    before, peak = rss(), [0.0]
    body = reward_pb2.ScoreRequest(items=[reward_pb2.ScoreItem(task_json=MCQA, response=r) for r in "AB" * (items // 2)])
    codes: Counter = Counter()
    latencies: list[float] = []
    lock = threading.Lock()
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.1):
            peak[0] = max(peak[0], rss())

    def one(ch) -> None:
        call = ch.unary_unary("/cascade.v1.RewardService/Score", request_serializer=reward_pb2.ScoreRequest.SerializeToString,
                              response_deserializer=reward_pb2.ScoreResponse.FromString)
        start = time.perf_counter()
        try:
            call(body, timeout=60)
            code = "OK"
        except grpc.RpcError as err:
            code = err.code().name
        with lock:
            codes[code] += 1
            latencies.append(time.perf_counter() - start)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with grpc.insecure_channel(address) as ch, ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(lambda _i: one(ch), range(requests)))
    stop.set()
    sampler.join()
    time.sleep(0.5)
    return LoadResult(requests, concurrency, codes, latencies, before, max(peak[0], before), rss())


def burst(address: str, method: str, request, response_type, concurrency: int) -> Counter:
    """`concurrency` identical calls at once, straight to one address; the status codes."""
    codes: Counter = Counter()
    lock = threading.Lock()
    barrier = threading.Barrier(concurrency)

    def one(ch) -> None:
        call = ch.unary_unary(method, request_serializer=type(request).SerializeToString,
                              response_deserializer=response_type.FromString)
        barrier.wait()
        try:
            call(request, timeout=120)
            code = "OK"
        except grpc.RpcError as err:
            code = err.code().name
        with lock:
            codes[code] += 1

    with grpc.insecure_channel(address) as ch, ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(lambda _i: one(ch), range(concurrency)))
    return codes


