"""The policy service over real gRPC on loopback: generate, errors, weight loading, info, health."""

from __future__ import annotations

import os
import subprocess
import sys

import grpc
import numpy as np
import pytest
import torch
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common import codec
from services.common.checksum import sha256_dir
from services.common.grpc_server import GrpcServer
from services.common.pb import common_pb2, policy_pb2, policy_pb2_grpc
from services.policy.config import PolicyConfig
from services.policy.core import PolicyCore
from services.policy.server import PolicyServicer
from tests.loop_thread import LoopThread
from tests.needs import needs_vllm
from tests.policy.test_core import edited_copy, perturbed_copy

pytestmark = pytest.mark.integration



@pytest.fixture(scope="module")
def served(tiny_model_dir):
    loop = LoopThread()
    config = PolicyConfig(model=str(tiny_model_dir), max_message_mb=1)
    core = PolicyCore.build(config)

    async def start():
        server = GrpcServer("policy", config)
        server.add(policy_pb2_grpc.add_PolicyServiceServicer_to_server, PolicyServicer(core), "cascade.v1.PolicyService")
        await server.start()
        await server.set_serving(True)
        return server

    server = loop.run(start())
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    yield policy_pb2_grpc.PolicyServiceStub(channel), channel, core
    channel.close()
    loop.run(server.shutdown())
    loop.close()


def request(prompts, n=2, **sampling):
    sampling.setdefault("max_tokens", 6)
    return policy_pb2.GenerateRequest(prompts=prompts, n=n, sampling=policy_pb2.SamplingParams(**sampling))


def ids_prompt(ids):
    return policy_pb2.Prompt(token_ids=np.asarray(ids, dtype="<i4").tobytes())


def chat_prompt(text):
    return policy_pb2.Prompt(conversation=common_pb2.Conversation(messages=[common_pb2.ChatMessage(role="user", content=text)]))


def test_generate_returns_aligned_ragged_arrays(served):
    stub, _, core = served
    reply = stub.Generate(request([chat_prompt("What is 3 + 4?"), ids_prompt([5, 6, 7])], n=3, seed=4, thinking=True), timeout=60)
    prompts = codec.decode(reply.prompt_token_ids, "prompt_token_ids", "int32")
    tokens = codec.decode(reply.token_ids, "token_ids", "int32")
    logprobs = codec.decode(reply.logprobs, "logprobs", "float32")
    assert len(prompts) == 2 and prompts[1].tolist() == [5, 6, 7]
    assert len(tokens) == len(logprobs) == len(reply.texts) == len(reply.finish_reasons) == 6
    assert [len(t) for t in tokens] == [len(lp) for lp in logprobs]
    assert all(r in (policy_pb2.FINISH_REASON_STOP, policy_pb2.FINISH_REASON_LENGTH) for r in reply.finish_reasons)
    # the log-probs equal a teacher-forced forward (T = 1, no filters)
    for i, (t, lp) in enumerate(zip(tokens, logprobs)):
        p = prompts[i // 3].tolist()
        ids = torch.tensor([p + t.tolist()])
        with torch.no_grad():
            ref = torch.log_softmax(core.backend.model(input_ids=ids).logits[0, len(p) - 1 : -1].float(), -1)
        np.testing.assert_allclose(lp, ref.gather(-1, torch.tensor(t.tolist())[:, None])[:, 0].numpy(), atol=1e-4)


def test_same_seed_over_the_wire_is_reproducible(served):
    stub = served[0]
    a = stub.Generate(request([ids_prompt([9, 10])], n=4, seed=1), timeout=60)
    b = stub.Generate(request([ids_prompt([9, 10])], n=4, seed=1), timeout=60)
    assert a.token_ids == b.token_ids and a.logprobs == b.logprobs


@pytest.mark.parametrize(
    "req, field",
    [
        (request([]), "prompts"),
        (request([ids_prompt([1])], n=0), "n"),
        (request([policy_pb2.Prompt(token_ids=b"\x01\x02\x03")]), "prompts[0].token_ids"),
        (request([policy_pb2.Prompt()]), "prompts[0]"),
        (request([ids_prompt([1, 99999])]), "prompts[0].token_ids"),
        (request([ids_prompt([1] * 3000)]), "prompts[0]"),
        (request([ids_prompt([1])], temperature=float("nan")), "sampling.temperature"),
        (request([ids_prompt([1])], top_p=1.5), "sampling.top_p"),
        (request([ids_prompt([1])], max_tokens=0), "sampling.max_tokens"),
    ],
)
def test_bad_input_is_invalid_argument_naming_the_field(served, req, field):
    stub = served[0]
    with pytest.raises(grpc.RpcError) as err:
        stub.Generate(req, timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith(field + ":")
    assert stub.GetInfo(policy_pb2.GetInfoRequest(), timeout=10).backend == "hf"  # still serving


def test_oversized_message_is_refused_and_the_server_keeps_serving(served):
    stub = served[0]
    with pytest.raises(grpc.RpcError) as err:
        stub.Generate(request([ids_prompt([1] * 300_000)]), timeout=30)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert stub.Generate(request([ids_prompt([1, 2])]), timeout=30).weight_version >= 0


def test_load_weights_checksum_architecture_and_info(served, tiny_model_dir, tmp_path):
    stub, _, core = served
    good = perturbed_copy(tiny_model_dir, tmp_path / "v5", seed=5)
    bad_sha = policy_pb2.LoadWeightsRequest(weights=common_pb2.WeightRef(version=5, uri=str(good), sha256="ab" * 32))
    with pytest.raises(grpc.RpcError) as err:
        stub.LoadWeights(bad_sha, timeout=60)
    assert err.value.code() == grpc.StatusCode.DATA_LOSS
    other = edited_copy(tiny_model_dir, tmp_path / "llama", architectures=["LlamaForCausalLM"])
    with pytest.raises(grpc.RpcError) as err:
        stub.LoadWeights(policy_pb2.LoadWeightsRequest(weights=common_pb2.WeightRef(version=5, uri=str(other), sha256=sha256_dir(other))), timeout=60)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "architecture" in err.value.details()
    assert stub.GetInfo(policy_pb2.GetInfoRequest(), timeout=10).weight_version == 0

    reply = stub.LoadWeights(policy_pb2.LoadWeightsRequest(weights=common_pb2.WeightRef(version=5, uri=f"file://{good}", sha256=sha256_dir(good))), timeout=60)
    assert reply.weight_version == 5 and reply.load_seconds > 0
    info = stub.GetInfo(policy_pb2.GetInfoRequest(), timeout=10)
    assert (info.weight_version, info.backend, info.architecture, info.device) == (5, "hf", "Qwen3ForCausalLM", "cpu")
    assert info.vocab_size == core.backend.spec.vocab_size
    assert stub.Generate(request([ids_prompt([3, 4])]), timeout=60).weight_version == 5


def test_health_is_serving(served):
    channel = served[1]
    reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service="cascade.v1.PolicyService"), timeout=10)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


@needs_vllm
def test_serve_policy_on_vllm_that_cannot_start_fails_with_one_line_naming_the_setting(tiny_model_dir):
    """vLLM is installed (make install), so the engine really tries: a memory fraction this machine
    cannot give is refused before it starts, in one line that names the setting to change."""
    env = {**os.environ, "CASCADE_POLICY_MODEL": str(tiny_model_dir), "CASCADE_POLICY_BACKEND": "vllm",
           "CASCADE_POLICY_GPU_MEMORY_UTILIZATION": "1.0", "CASCADE_LOG_FORMAT": "text"}
    env.pop("CASCADE_POLICY_KV_CACHE_MEMORY_BYTES", None)
    proc = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "serve", "policy"], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error:") and "CASCADE_POLICY_GPU_MEMORY_UTILIZATION=1.0" in lines[-1], lines[-3:]
    assert "Traceback" not in proc.stderr
