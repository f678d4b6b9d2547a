"""A cascade submitted through the control API is trained by a real stack, and the API reports it.

The policy, reward and trainer services, a Celery worker (embedded SQLite broker and ledger) and
the API (`python -m services.api`) run as processes on loopback. The test speaks HTTP only: POST
/runs, poll GET /runs/{id}, then read metrics, evals and the Prometheus gauges of the finished run.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from services.common.supervisor import ProcessSpec, Supervisor, free_port, python_module
from services.orchestrator.stack import local_stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def cascade(model: str) -> str:
    stage = {"name": "mcqa-rl", "type": "grpo", "domains": ["mcqa"], "batch_size": 4, "rollouts_per_prompt": 2,
             "steps": 2, "eval_every": 1, "dynamic_filtering": False, "optimizer": {"lr": 1e-3},
             "sampling": {"temperature": 1.0, "max_tokens": 12, "thinking": False}, "eval": {"prompts_per_domain": 4}}
    return yaml.safe_dump({"name": "via-api", "model": model, "stages": [stage]})


def test_a_run_submitted_over_http_is_trained_and_reported(tmp_path, tiny_model_dir):
    home = tmp_path / "home"
    stack = local_stack(home, tiny_model_dir)
    sup = Supervisor(home / "logs")
    try:
        services = [s for s in stack.specs if s.name in ("policy", "reward", "trainer")]
        with ThreadPoolExecutor(len(services)) as pool:
            for f in [pool.submit(sup.start, s) for s in services]:
                f.result()
        sup.start(next(s for s in stack.specs if s.name == "worker"), wait=False)
        port = free_port()
        sup.start(ProcessSpec("api", python_module("services.api"), {**stack.env, "CASCADE_API_PORT": str(port)},
                              http_port=port, restart=False, ready_timeout=60))
        api = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)

        res = api.post("/runs", content=cascade(str(tiny_model_dir)), headers={"content-type": "application/yaml"})
        assert res.status_code == 201, res.text
        run_id = res.json()["id"]
        deadline = time.monotonic() + 300
        while (run := api.get(f"/runs/{run_id}").json())["status"] not in ("succeeded", "failed", "cancelled"):
            assert time.monotonic() < deadline, f"run did not finish: {run}; worker: {sup.tail('worker')}"
            time.sleep(0.5)
        assert run["status"] == "succeeded", f"{run['error']}; worker: {sup.tail('worker')}"
        assert [(s["status"], s["steps_done"], s["steps_total"]) for s in run["stages"]] == [("succeeded", 2, 2)]

        steps = api.get(f"/runs/{run_id}/metrics").json()["stages"][0]["steps"]
        assert [s["phase"] for s in steps] == ["done", "done"]
        for group in ("generate", "score", "train", "sync"):
            assert all(s["phase_seconds"][group] > 0 for s in steps), group
        curve = api.get(f"/runs/{run_id}/evals").json()["domains"]
        assert [d["domain"] for d in curve] == ["mcqa"]
        assert [(p["step_index"], p["x"]) for p in curve[0]["points"]] == [(-1, 0), (0, 1), (1, 2)]

        gauges = {(s.name, tuple(sorted(s.labels.items()))): s.value
                  for fam in text_string_to_metric_families(api.get("/metrics").text) for s in fam.samples}
        assert gauges[("cascade_orchestrator_run_steps_done", (("run", str(run_id)),))] == 2
        assert gauges[("cascade_orchestrator_domain_reward", (("domain", "mcqa"), ("run", str(run_id))))] == \
            pytest.approx(curve[0]["points"][-1]["score"])
        assert api.get("/").status_code == 200
    finally:
        sup.stop(grace=5)
