"""`cascade serve reward` as a real process over loopback gRPC: verdicts per domain, hostile code
contained while the service keeps serving, back-pressure, bad input, metrics, and the CLI giving
identical results in-process and via the server."""

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
import pytest

from services.common.grpc_client import ClientOptions, ReplicaClient
from services.common.pb import reward_pb2, reward_pb2_grpc
from services.common.sandbox.isolation import find_processes
from services.common.supervisor import free_port
from services.common.tasks import load_tasks, task_to_json
from services.common.toolcalls import format_tool_calls

pytestmark = pytest.mark.integration
BASE_UID = 62400
ENV = {"CASCADE_REWARD_SANDBOX_BASE_UID": str(BASE_UID), "CASCADE_REWARD_SANDBOX_WORKERS": "2",
       "CASCADE_REWARD_VERIFY_WORKERS": "1", "CASCADE_REWARD_SANDBOX_TIMEOUT_S": "3",
       "CASCADE_REWARD_SANDBOX_NPROC": "8", "CASCADE_REWARD_SANDBOX_MEMORY_MB": "256",
       "CASCADE_REWARD_MAX_PENDING_ITEMS": "30", "CASCADE_LOG_LEVEL": "WARNING"}

HOSTILE = {
    "fork_bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
    "memory_bomb": "x = []\nwhile True:\n    x.append(bytearray(10**7))",
    "infinite_loop": "while True:\n    pass",
    "daemon": "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\nprint(3)",
    "network": "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)\nprint(3)",
    "sigterm": "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(60)",
    "kill_parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint(3)",
    "huge_stdout": "while True:\n    print('x' * 10000)",
}


def code_task(name: str) -> str:
    return json.dumps({"id": f"code-{name}", "domain": "code", "messages": [{"role": "user", "content": "add"}],
                       "tests": [{"input": "1 2\n", "output": "3\n"}]})


@pytest.fixture(scope="module")
def service():
    port, metrics_port = free_port(), free_port()
    env = {**os.environ, **ENV, "CASCADE_REWARD_PORT": str(port), "CASCADE_REWARD_METRICS_PORT": str(metrics_port)}
    proc = subprocess.Popen([sys.executable, "-m", "services.cli.main", "serve", "reward"], env=env,
                            stderr=subprocess.PIPE, text=True)
    client = ReplicaClient(f"127.0.0.1:{port}", reward_pb2_grpc.RewardServiceStub, ClientOptions(timeout=120, attempts=1))
    try:
        client.wait_ready(timeout=120)
        yield {"client": client, "port": port, "metrics_port": metrics_port, "proc": proc}
    finally:
        client.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def score(client, items):
    request = reward_pb2.ScoreRequest(items=[reward_pb2.ScoreItem(task_json=t, response=r) for t, r in items])
    return client.call("Score", request).results


def test_mixed_batch_over_grpc(service, synth_dir):
    math_task = load_tasks(synth_dir / "math" / "validation.jsonl")[0]
    tool_task = load_tasks(synth_dir / "tool" / "validation.jsonl")[0]
    items = [
        (task_to_json(math_task), f"<think>easy</think>\\boxed{{{math_task.ground_truth}}}"),
        (task_to_json(math_task), "I do not know"),
        (task_to_json(tool_task), format_tool_calls(tool_task.expected_calls)),
        (task_to_json(tool_task), "<tool_call><function=broken>"),
        (code_task("ok"), "```python\na, b = map(int, input().split())\nprint(a + b)\n```"),
    ]
    results = score(service["client"], items)
    V = reward_pb2
    assert [r.verdict for r in results] == [V.VERDICT_CORRECT, V.VERDICT_INVALID, V.VERDICT_CORRECT,
                                           V.VERDICT_INVALID, V.VERDICT_CORRECT]
    assert [r.reward for r in results] == [1.0, 0.0, 1.0, 0.0, 1.0]
    assert all(r.reason and r.seconds > 0 for r in results) and results[4].checks[0].name == "test[0]"


def test_hostile_programs_are_contained_and_the_service_keeps_serving(service):
    items = [(code_task(name), f"```python\n{code}\n```") for name, code in HOSTILE.items()]
    results = score(service["client"], items)
    for name, r in zip(HOSTILE, results):
        assert r.verdict in (reward_pb2.VERDICT_INCORRECT, reward_pb2.VERDICT_TIMEOUT), (name, r.reason)
        assert r.reward == 0.0
    assert results[list(HOSTILE).index("infinite_loop")].verdict in (reward_pb2.VERDICT_TIMEOUT, reward_pb2.VERDICT_INCORRECT)
    assert results[list(HOSTILE).index("sigterm")].verdict == reward_pb2.VERDICT_TIMEOUT
    for uid in (BASE_UID, BASE_UID + 1):
        assert find_processes(uid, None) == []
    assert service["proc"].poll() is None
    ok = score(service["client"], [(code_task("after"), "print(3)")])
    assert ok[0].verdict == reward_pb2.VERDICT_CORRECT


def correct_code_items(n: int, seed: int) -> list[tuple[str, str]]:
    """`n` synthetic code tasks (function and stdin programs) with their reference solutions."""
    from services.common.synth.code import answer_text, make_problem

    rng = random.Random(seed)
    items = []
    for i in range(n):
        p = make_problem(rng, rng.choice([1, 2, 3]))
        task = {"id": f"code-{seed}-{i}", "domain": "code", "messages": [{"role": "user", "content": p.prompt}],
                "tests": p.tests}
        items.append((json.dumps(task), answer_text(p.solution)))
    return items


def test_correct_code_under_concurrent_calls_is_never_killed(service):
    """Many small Score calls at once keep gRPC's threads busy while runs start. Runs forked from
    the threaded service died by SIGABRT/SIGSEGV before exec (~1-3 %: 2 to 7 of 240 here) and
    were scored as the candidate's crash; runs started by the launchers never are."""
    calls, per_call = 96, 3  # 8 calls in flight x 3 items stay under max_pending_items (30)
    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(lambda k: score(service["client"], correct_code_items(per_call, k)), range(calls)))
    results = [r for reply in replies for r in reply]
    killed = [r.reason for r in results if "killed by" in r.reason]
    assert killed == [], f"{len(killed)} of {len(results)} correct programs 'killed': {killed[:3]}"
    wrong = [(r.verdict, r.reason) for r in results if r.verdict not in (reward_pb2.VERDICT_CORRECT, reward_pb2.VERDICT_TIMEOUT)]
    assert wrong == []


def test_bad_input_and_back_pressure(service):
    bad = json.dumps({"domain": "chess", "messages": [{"role": "user", "content": "q"}]})
    with pytest.raises(grpc.RpcError) as err:
        score(service["client"], [(bad, "x")])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "items[0].task_json.domain" in err.value.details()
    many = [(code_task("x"), "print(3)")] * 31
    with pytest.raises(grpc.RpcError) as err:
        score(service["client"], many)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "max_pending_items" in err.value.details()


def test_metrics_are_exported(service):
    text = urllib.request.urlopen(f"http://127.0.0.1:{service['metrics_port']}/metrics", timeout=10).read().decode()
    assert 'cascade_reward_verdicts_total{domain="math",verdict="correct"}' in text
    for name in ("cascade_reward_score_duration_seconds", "cascade_reward_sandbox_executions_total",
                 "cascade_reward_queue_depth", "cascade_reward_rpc_duration_seconds"):
        assert name in text


def test_cli_in_process_and_via_server_agree(service, synth_dir, tmp_path, capsys, monkeypatch):
    from services.cli.main import main

    lines = []
    for domain in ("math", "mcqa", "structured", "long_context"):
        for t in load_tasks(synth_dir / domain / "validation.jsonl")[:2]:
            record = json.loads(task_to_json(t))
            lines.append({**record, "response": f"Answer: {t.ground_truth}"})
            lines.append({**record, "response": "\\boxed{0}"})
    lines.append({**json.loads(code_task("cli")), "response": "print(3)"})
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("CASCADE_REWARD_SANDBOX_BASE_UID", str(BASE_UID + 50))
    capsys.readouterr()
    main(["reward", "score", "--input", str(path), "--server", f"127.0.0.1:{service['port']}"])
    remote = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    out_file = tmp_path / "out.jsonl"
    main(["reward", "score", "--input", str(path), "--output", str(out_file)])
    local = [json.loads(x) for x in out_file.read_text().splitlines()]
    assert remote == local and len(local) == len(lines)
    assert [r["id"] for r in local] == [x["id"] for x in lines]
    assert set(local[0]) == {"id", "domain", "reward", "verdict", "reason"}
    assert {r["verdict"] for r in local} >= {"correct", "incorrect"}


def test_cli_names_the_bad_line(tmp_path, capsys):
    from services.cli.main import main

    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"domain": "math", "messages": [{"role": "user", "content": "q"}], "response": "x"}) + "\n")
    with pytest.raises(SystemExit) as exit_:
        main(["reward", "score", "--input", str(path)])
    assert exit_.value.code == 1
    assert "bad.jsonl:1: ground_truth" in " ".join(capsys.readouterr().err.split())


def test_load_reward_model_then_score_rlhf(service, tiny_model_dir):
    from services.common.checksum import sha256_dir

    client = service["client"]
    with pytest.raises(grpc.RpcError) as err:
        client.call("LoadRewardModel", reward_pb2.LoadRewardModelRequest(uri=str(tiny_model_dir), sha256="0" * 64))
    assert err.value.code() == grpc.StatusCode.DATA_LOSS
    rlhf = json.dumps({"domain": "rlhf", "messages": [{"role": "user", "content": "hi"}]})
    assert score(client, [(rlhf, "hello")])[0].verdict == reward_pb2.VERDICT_ERROR  # no model yet
    reply = client.call("LoadRewardModel", reward_pb2.LoadRewardModelRequest(uri=str(tiny_model_dir),
                                                                            sha256=sha256_dir(tiny_model_dir)))
    assert reply.uri == str(tiny_model_dir) and reply.load_seconds > 0
    results = score(client, [(rlhf, "hello"), (rlhf, "go away")])
    assert [r.verdict for r in results] == [reward_pb2.VERDICT_CORRECT] * 2
    assert results[0].reward != results[1].reward
    with pytest.raises(grpc.RpcError) as err:
        client.call("LoadRewardModel", reward_pb2.LoadRewardModelRequest(uri="/no/such/dir"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "uri" in err.value.details()
