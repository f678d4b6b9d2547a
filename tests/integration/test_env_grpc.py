"""`cascade serve env` as a real process over loopback gRPC (one server for the module): each
environment against its contract, concurrent episodes isolated, a hanging cell at its deadline,
flooding output cut, bad requests as status codes, auth, metrics, reflection, and nothing left
running after close and after SIGTERM. Then a second server under the supervisor, SIGKILLed in the
middle of the rollout loop's episodes and restarted by it: the episodes are replayed, not masked."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from services.common.grpc_client import ClientOptions, ReplicaClient
from services.common.pb import env_pb2, env_pb2_grpc
from services.common.sandbox.isolation import find_processes
from services.common.supervisor import ProcessSpec, Supervisor, free_port, python_module
from services.common.synth.multiturn import swe as swe_synth
from services.common.synth.multiturn import workbench as wb_synth
from services.common.toolcalls import format_tool_calls
from tests.needs import NEMO_GYM_SAMPLES

pytestmark = pytest.mark.integration
BASE_UID, WORKERS, TOKEN = 63400, 2, "env-test-token"
ENV = {"CASCADE_ENV_SANDBOX_BASE_UID": str(BASE_UID), "CASCADE_ENV_SANDBOX_WORKERS": str(WORKERS),
       "CASCADE_ENV_TOOL_TIMEOUT_S": "2", "CASCADE_ENV_TOOL_OUTPUT_CHARS": "500", "CASCADE_ENV_AUTH_TOKEN": TOKEN,
       "CASCADE_LOG_LEVEL": "WARNING"}


def leftovers() -> list:
    return [p for uid in range(BASE_UID, BASE_UID + WORKERS) for p in find_processes(uid, None)]


@pytest.fixture(scope="module")
def service():
    port, metrics_port = free_port(), free_port()
    env = {**os.environ, **ENV, "CASCADE_ENV_PORT": str(port), "CASCADE_ENV_METRICS_PORT": str(metrics_port)}
    proc = subprocess.Popen([sys.executable, "-m", "services.cli.main", "serve", "env"], env=env)
    client = ReplicaClient(f"127.0.0.1:{port}", env_pb2_grpc.EnvServiceStub,
                           ClientOptions(timeout=60, attempts=1, token=TOKEN))
    try:
        client.wait_ready(timeout=120)
        yield {"client": client, "port": port, "metrics_port": metrics_port}
    finally:
        client.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert leftovers() == []


def open_episode(client, environment: str, task: dict, **kw) -> env_pb2.OpenEpisodeResponse:
    return client.call("OpenEpisode", env_pb2.OpenEpisodeRequest(environment=environment, task_json=json.dumps(task), **kw))


def step(client, episode_id: str, text: str) -> env_pb2.StepResponse:
    return client.call("Step", env_pb2.StepRequest(episode_id=episode_id, assistant_text=text))


def close(client, episode_id: str) -> env_pb2.CloseEpisodeResponse:
    return client.call("CloseEpisode", env_pb2.CloseEpisodeRequest(episode_id=episode_id))


def calls(*items) -> str:
    return format_tool_calls([{"name": n, "arguments": a} for n, a in items])


def python_task(answer: str = "42") -> dict:
    return {"messages": [{"role": "user", "content": "compute"}], "ground_truth": answer}


def test_list_environments(service):
    envs = {e.name: e for e in service["client"].call("ListEnvironments", env_pb2.ListEnvironmentsRequest()).environments}
    assert sorted(envs) == ["python", "swe", "workbench"]
    assert (len(envs["workbench"].tools), len(envs["swe"].tools), list(envs["python"].tools)) == (27, 4, ["python"])


def test_workbench_episode(service):
    client = service["client"]
    record = wb_synth.make_tasks(random.Random(3), 1, "validation")[0]
    opened = open_episode(client, "workbench", record, max_turns=4)
    offered = [tool["name"] for tool in json.loads(opened.tools_json)]
    assert [m.role for m in opened.messages] == ["system", "user"] and offered == record["tool_names"]
    assert opened.max_turns == 4 and opened.deadline_s > 0
    look = step(client, opened.episode_id, calls(("company_directory_find_email_address", {"name": "a"})))
    assert (look.done, look.verdict, look.turns, [m.role for m in look.messages]) == (
        False, env_pb2.EPISODE_VERDICT_RUNNING, 1, ["tool"])
    truth = [(c["name"], json.loads(c["arguments"])) for c in record["ground_truth"]]
    assert step(client, opened.episode_id, "<think>\nnow\n</think>\n\n" + calls(*truth)).tool_errors == 0
    final = step(client, opened.episode_id, "Done.")
    assert (final.done, final.verdict, final.reward) == (True, env_pb2.EPISODE_VERDICT_OK, 1.0)
    closed = close(client, opened.episode_id)
    assert (closed.verdict, closed.reward, closed.turns) == (env_pb2.EPISODE_VERDICT_OK, 1.0, 3)


def test_python_episode_hanging_and_flooding_cells(service):
    client = service["client"]
    opened = open_episode(client, "python", python_task())
    hang = step(client, opened.episode_id, calls(("python", {"code": "while True:\n    pass"})))
    assert hang.tool_errors == 1 and "budget" in hang.messages[0].content and 1.5 < hang.env_seconds < 8
    flood = step(client, opened.episode_id, calls(("python", {"code": "print('x' * 10**7)"})))
    assert len(flood.messages[0].content) <= 500 and "output truncated" in flood.messages[0].content
    assert step(client, opened.episode_id, calls(("python", {"code": "print(6 * 7)"}))).messages[0].content == "42\n"
    final = step(client, opened.episode_id, "\\boxed{42}")
    assert (final.verdict, final.reward) == (env_pb2.EPISODE_VERDICT_OK, 1.0)
    close(client, opened.episode_id)
    assert leftovers() == []


def test_swe_episode(service):
    client = service["client"]
    record = swe_synth.make_tasks(random.Random(2), 1, "validation")[0]
    lines = record["reference_patch"].splitlines()
    path = lines[1].removeprefix("+++ b/")
    old = next(ln[1:] for ln in lines if ln.startswith("-") and not ln.startswith("---"))
    new = next(ln[1:] for ln in lines if ln.startswith("+") and not ln.startswith("+++"))
    opened = open_episode(client, "swe", record)
    assert "failed" in step(client, opened.episode_id, calls(("run_tests", {}))).messages[0].content
    assert step(client, opened.episode_id, calls(("replace_in_file", {"path": path, "old": old, "new": new}))).tool_errors == 0
    final = step(client, opened.episode_id, "fixed")
    assert (final.verdict, final.reward) == (env_pb2.EPISODE_VERDICT_OK, 1.0), final.reason
    close(client, opened.episode_id)


def test_concurrent_episodes_keep_their_own_state(service):
    client = service["client"]

    def episode(i: int) -> str:
        opened = open_episode(client, "python", python_task(str(i)))
        step(client, opened.episode_id, calls(("python", {"code": f"v = {i}"})))
        out = step(client, opened.episode_id, calls(("python", {"code": "print(v * 10)"}))).messages[0].content
        assert step(client, opened.episode_id, f"\\boxed{{{i}}}").reward == 1.0
        close(client, opened.episode_id)
        return out

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(episode, range(4))) == [f"{i * 10}\n" for i in range(4)]


def test_errors_as_status_codes(service):
    client = service["client"]
    with pytest.raises(grpc.RpcError) as err:
        open_episode(client, "chess", {})
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "environments: python, swe, workbench" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        open_episode(client, "python", {"messages": [{"role": "user", "content": "x"}]})
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "task_json.expected_answer" in err.value.details()
    with open(NEMO_GYM_SAMPLES) as f:
        row = next(r for r in map(json.loads, f) if r.get("environment_name") == "workbench")
    with pytest.raises(grpc.RpcError) as err:
        open_episode(client, "workbench", row)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "WORKBENCH_TABLES" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        step(client, "python-unknown", "x")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_calls_without_the_token_are_refused(service):
    anonymous = ReplicaClient(f"127.0.0.1:{service['port']}", env_pb2_grpc.EnvServiceStub, ClientOptions(attempts=1))
    with pytest.raises(grpc.RpcError) as err:
        anonymous.call("ListEnvironments", env_pb2.ListEnvironmentsRequest())
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    anonymous.close()


def test_metrics_and_reflection(service):
    text = urllib.request.urlopen(f"http://127.0.0.1:{service['metrics_port']}/metrics", timeout=10).read().decode()
    for name in ("cascade_env_episodes_opened_total", "cascade_env_episodes_closed_total", "cascade_env_turns_total",
                 "cascade_env_turn_duration_seconds_bucket", "cascade_env_tool_errors_total", "cascade_env_rpc_duration_seconds"):
        assert name in text, name
    with grpc.insecure_channel(f"127.0.0.1:{service['port']}") as channel:
        refl = reflection_pb2_grpc.ServerReflectionStub(channel)
        reply = next(refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5))
    assert "cascade.v1.EnvService" in {s.name for s in reply.list_services_response.service}


def test_malformed_bodies_get_a_status_never_internal(service):
    rng = random.Random(0)
    seeds = {"OpenEpisode": env_pb2.OpenEpisodeRequest(environment="python", task_json=json.dumps(python_task())),
             "Step": env_pb2.StepRequest(episode_id="python-x", assistant_text=calls(("python", {"code": "1"}))),
             "CloseEpisode": env_pb2.CloseEpisodeRequest(episode_id="python-x")}
    codes = []
    with grpc.insecure_channel(f"127.0.0.1:{service['port']}") as channel:
        for method in ("ListEnvironments", "OpenEpisode", "Step", "CloseEpisode"):
            call = channel.unary_unary(f"/cascade.v1.EnvService/{method}", request_serializer=None,
                                       response_deserializer=None)
            bodies = [b"", *(bytes(rng.randrange(256) for _ in range(rng.randint(1, 48))) for _ in range(6))]
            if method in seeds:
                raw = bytearray(seeds[method].SerializeToString())
                for _ in range(6):
                    body = bytearray(raw)
                    body[rng.randrange(len(body))] ^= 1 << rng.randrange(8)
                    bodies.append(bytes(body))
            for body in bodies:
                try:
                    call(body, timeout=30, metadata=(("authorization", f"Bearer {TOKEN}"),))
                    codes.append("OK")
                except grpc.RpcError as err:
                    codes.append(err.code().name)
    assert "INTERNAL" not in codes and "UNKNOWN" not in codes, codes
    assert codes.count("INVALID_ARGUMENT") >= 5
    service["client"].wait_ready(timeout=10)


def test_episodes_survive_a_sigkilled_env_service_the_supervisor_restarts(tiny_model_dir, tmp_path):
    """Four workbench episodes (a lookup, then an answer) on a supervised env service; after every lookup
    has been stepped, the service is SIGKILLed. The answers' Steps are UNAVAILABLE (or NOT_FOUND on
    the restarted service); each episode replays its lookup on a fresh episode and ends `ok` with the
    reward and the very sample of an undisturbed run."""
    from services.common.modelio import load_tokenizer
    from services.orchestrator.cascade_schema import SamplingConfig
    from services.orchestrator.episodes import EnvRetry, EpisodeLimits, episode_metrics, run_episodes
    from tests.orchestrator.test_episodes import lookup_then_answer

    port, metrics_port = free_port(), free_port()
    env = {**ENV, "CASCADE_ENV_SANDBOX_BASE_UID": str(BASE_UID + 100), "CASCADE_ENV_PORT": str(port),
           "CASCADE_ENV_METRICS_PORT": str(metrics_port)}
    tokenizer = load_tokenizer(str(tiny_model_dir))
    tasks = wb_synth.make_tasks(random.Random(7), 2, "train")
    limits, sampling = EpisodeLimits(4, 4096, 60.0), SamplingConfig(temperature=1.0, max_tokens=48, thinking=False)
    with Supervisor(tmp_path / "logs") as sup:
        sup.start(ProcessSpec("env", python_module("services.cli.main", "serve", "env"), env=env,
                              grpc_address=f"127.0.0.1:{port}"))
        client = ReplicaClient(f"127.0.0.1:{port}", env_pb2_grpc.EnvServiceStub,
                               ClientOptions(timeout=30, attempts=2, backoff=0.2, token=TOKEN))
        first_pid = sup.pid("env")
        try:
            calm = run_episodes(lookup_then_answer(tokenizer), client, tokenizer, "workbench", tasks, 2, sampling,
                                limits, seed=0)
            policy = KillOnGenerate(lookup_then_answer(tokenizer), lambda: sup.kill("env"), at_turn=2)
            out = run_episodes(policy, client, tokenizer, "workbench", tasks, 2, sampling, limits, seed=0,
                               retry=EnvRetry(retries=6, backoff_s=0.5))
        finally:
            client.close()
        assert policy.killed and sup.pid("env") != first_pid, "the supervisor restarted the killed service"
    assert calm["verdicts"] == ["ok"] * 4
    assert out["verdicts"] == ["ok"] * 4, out["reasons"]
    assert out["rewards"] == calm["rewards"] and out["input_ids"] == calm["input_ids"]
    assert out["loss_mask"] == calm["loss_mask"] and out["logprobs"] == calm["logprobs"]
    assert all(r >= 1 for r in out["env_retries"]), "every episode in flight lost its env"
    assert out["env_replays"] == [1] * 4 and out["env_restarts"] == [0] * 4 and not any(out["env_lost"])
    m = episode_metrics(out)
    assert m["episodes/env_replays"] == 4.0 and m["episodes/env_retries"] >= 4.0 and m["episodes/env_lost"] == 0.0


class KillOnGenerate:
    """A policy client that runs `kill` once, before answering the first Generate whose prompts hold
    `at_turn` − 1 assistant turns (every episode's previous turn has been stepped by then)."""

    def __init__(self, policy, kill, at_turn: int):
        self.policy, self.kill, self.at_turn, self.killed = policy, kill, at_turn, False

    def call(self, method, request, timeout=None):
        if not self.killed:
            text = self.policy.tokenizer.decode(
                np.frombuffer(request.prompts[0].token_ids, dtype="<i4").tolist(), skip_special_tokens=False)
            if text.count("<|im_start|>assistant") >= self.at_turn:
                self.kill()
                self.killed = True
        return self.policy.call(method, request, timeout)
