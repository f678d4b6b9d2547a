"""The teacher service over real gRPC on loopback: scoring, errors, loading, routing and fail-over."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import grpc
import numpy as np
import pytest

from services.common import codec
from services.common.errors import InvalidArgument
from services.common.grpc_client import ClientOptions, ReplicaClient
from services.common.grpc_server import GrpcServer
from services.common.pb import teacher_pb2, teacher_pb2_grpc
from services.common.supervisor import free_port
from services.teacher.client import Sample, TeacherClient, build_request
from services.teacher.config import TeacherConfig
from services.teacher.core import TeacherCore
from services.teacher.server import TeacherServicer
from tests.integration.test_policy_grpc import LoopThread
from tests.policy.test_core import perturbed_copy

pytestmark = pytest.mark.integration

PROMPTS = [[5, 6, 7], [8, 9]]
COMPLETIONS = [[10, 11], [12], [13, 14, 15]]
INDEX = [0, 0, 1]
FAST = ClientOptions(timeout=30, attempts=2, backoff=0.05)


def start(loop, core):
    async def build():
        server = GrpcServer("teacher", TeacherConfig())
        server.add(teacher_pb2_grpc.add_TeacherServiceServicer_to_server, TeacherServicer(core), "cascade.v1.TeacherService")
        await server.start()
        await server.set_serving(True)
        return server

    return loop.run(build())


@pytest.fixture(scope="module")
def cluster(tiny_model_dir, tmp_path_factory):
    """Replica A serves math (tiny) and if (perturbed); replica B serves math only."""
    loop = LoopThread()
    if_dir = perturbed_copy(tiny_model_dir, tmp_path_factory.mktemp("t") / "if", seed=3)
    core_a, core_b = TeacherCore(TeacherConfig()), TeacherCore(TeacherConfig())
    core_a.load_teacher("math", str(tiny_model_dir))
    core_a.load_teacher("if", str(if_dir))
    core_b.load_teacher("math", str(tiny_model_dir))
    a, b = start(loop, core_a), start(loop, core_b)
    yield {"loop": loop, "a": a, "b": b, "core": core_a, "if_dir": if_dir}
    for s in (a, b):
        loop.run(s.shutdown())
    loop.close()


def stub(server):
    return teacher_pb2_grpc.TeacherServiceStub(grpc.insecure_channel(f"127.0.0.1:{server.port}"))


def test_score_tokens_matches_the_core(cluster):
    reply = stub(cluster["a"]).ScoreTokens(build_request("math", PROMPTS, COMPLETIONS, INDEX, top_k=2, temperature=0.9), timeout=30)
    direct = cluster["core"].score("math", [np.array(p) for p in PROMPTS], [np.array(c) for c in COMPLETIONS], INDEX, 2, 0.9)
    got = codec.decode(reply.logprobs, "logprobs", "float32")
    assert [len(r) for r in got] == [2, 1, 3]
    for row, s in zip(got, direct.scores):
        np.testing.assert_allclose(row, s.logprobs, atol=1e-6)
    assert list(reply.topk_ids.lengths) == [4, 2, 6] and list(reply.topk_logprobs.lengths) == [4, 2, 6]


def ragged_float():
    return codec.encode([[1.0, 2.0]], "float32")


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda r: setattr(r, "domain", "chess"), "domain"),
        (lambda r: r.completion_ids.CopyFrom(codec.encode([], "int32")) or r.ClearField("prompt_index"), "completion_ids"),
        (lambda r: r.completion_ids.CopyFrom(ragged_float()), "completion_ids"),
        (lambda r: setattr(r.prompt_ids, "data", r.prompt_ids.data[:-2]), "prompt_ids"),
        (lambda r: r.prompt_index.__setitem__(2, 9), "prompt_index[2]"),
        (lambda r: r.completion_ids.CopyFrom(codec.encode([[10], [1 << 20], [3]], "int32")), "completion_ids[1]"),
        (lambda r: r.completion_ids.CopyFrom(codec.encode([[10], [1] * 2100, [3]], "int32")), "completion_ids[1]"),
        (lambda r: setattr(r, "temperature", float("nan")), "temperature"),
        (lambda r: setattr(r, "top_k", 100), "top_k"),
    ],
)
def test_bad_input_is_invalid_argument_and_the_server_keeps_serving(cluster, mutate, field):
    s = stub(cluster["a"])
    req = build_request("math", PROMPTS, COMPLETIONS, INDEX)
    mutate(req)
    with pytest.raises(grpc.RpcError) as err:
        s.ScoreTokens(req, timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith(field + ":") or err.value.details().startswith(field + "[")
    assert len(s.ListTeachers(teacher_pb2.ListTeachersRequest(), timeout=10).teachers) == 2


def test_load_and_list_teachers(cluster, tiny_model_dir):
    s = stub(cluster["b"])
    reply = s.LoadTeacher(teacher_pb2.LoadTeacherRequest(domain="code", uri=str(tiny_model_dir)), timeout=60)
    assert reply.info.architecture == "Qwen3ForCausalLM" and reply.info.backend == "hf" and reply.load_seconds > 0
    listed = {t.domain: t for t in s.ListTeachers(teacher_pb2.ListTeachersRequest(), timeout=10).teachers}
    assert sorted(listed) == ["code", "math"] and listed["code"].uri == str(tiny_model_dir)
    with pytest.raises(grpc.RpcError) as err:
        s.LoadTeacher(teacher_pb2.LoadTeacherRequest(domain="x", uri=str(tiny_model_dir), sha256="00" * 32), timeout=60)
    assert err.value.code() == grpc.StatusCode.DATA_LOSS


def test_client_routes_each_sample_to_its_domain(cluster):
    addr = f"127.0.0.1:{cluster['a'].port}"
    samples = [Sample(d, PROMPTS[i % 2], COMPLETIONS[i % 3]) for i, d in enumerate(["math", "if", "math", "if", "math"])]
    with TeacherClient({"math": addr, "if": addr}, FAST) as client:
        mixed = client.score_samples(samples, top_k=2)
        for i, s in enumerate(samples):
            alone = client.score(s.domain, [s.prompt_ids], [s.completion_ids], [0], top_k=2)
            # float32 forwards of a batch and of one row differ by rounding (~5e-7 relative at -28 here)
            np.testing.assert_allclose(mixed.logprobs[i], alone.logprobs[0], rtol=1e-5, atol=1e-5)
            assert mixed.topk_ids[i].shape == (len(s.completion_ids), 2)
        assert mixed.weight_versions == {"math": 0, "if": 0}
        assert not np.allclose(mixed.logprobs[0], client.score("if", [PROMPTS[0]], [COMPLETIONS[0]], [0]).logprobs[0])
        with pytest.raises(InvalidArgument, match="domain"):
            client.score_samples([Sample("chess", [1], [2])])


def test_client_fails_over_to_a_live_replica(cluster):
    dead = free_port()
    routes = {"math": f"127.0.0.1:{dead},127.0.0.1:{cluster['b'].port}"}
    with TeacherClient(routes, FAST) as client:
        for _ in range(3):  # every round-robin start, including the dead replica first
            r = client.score("math", PROMPTS, COMPLETIONS, INDEX)
            assert [len(x) for x in r.logprobs] == [2, 1, 3]


def test_serve_teacher_process_and_cli_score_via_server(tiny_model_dir, tmp_path, capsys):
    from services.cli.main import main

    port = free_port()
    env = {**os.environ, "CASCADE_TEACHER_PORT": str(port), "CASCADE_TEACHER_TEACHERS": json.dumps({"math": str(tiny_model_dir)})}
    proc = subprocess.Popen([sys.executable, "-m", "services.cli.main", "serve", "teacher"], env=env, stderr=subprocess.PIPE, text=True)
    try:
        client = ReplicaClient(f"127.0.0.1:{port}", teacher_pb2_grpc.TeacherServiceStub)
        client.wait_ready(timeout=90)
        lines = [{"prompt_ids": p, "completion_ids": c, "domain": "math"} for p, c in zip([PROMPTS[i] for i in INDEX], COMPLETIONS)]
        path = tmp_path / "seqs.jsonl"
        path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
        capsys.readouterr()
        main(["teacher", "score", "--input", str(path), "--server", f"127.0.0.1:{port}"])
        out = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
        assert [len(x["logprobs"]) for x in out] == [2, 1, 3]
        reply = client.call("ScoreTokens", build_request("math", PROMPTS, COMPLETIONS, INDEX))
        for row, x in zip(codec.decode(reply.logprobs, "logprobs", "float32"), out):
            np.testing.assert_allclose(row, x["logprobs"], atol=1e-5)
        client.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
