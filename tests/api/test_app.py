"""The HTTP API with FastAPI's TestClient over the production core: embedded ledger, embedded broker."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from services.api.app import PAGE_DIR, build_app
from services.api.config import ApiSettings
from services.orchestrator.config import OrchestratorSettings
from tests.api.conftest import CASCADE, record_run

YAML_HEADERS = {"content-type": "application/yaml"}
RUN_ROUTES = ("/runs/{id}", "/runs/{id}/metrics", "/runs/{id}/evals", "/runs/{id}/teachers", "/runs/{id}/claims")


def queued_tasks(orchestrator: OrchestratorSettings) -> list[tuple[str, str, list]]:
    """(queue, task name, args) of every message waiting in the embedded SQLite broker."""
    with sqlite3.connect(Path(orchestrator.home) / "broker.sqlite") as db:
        rows = db.execute("SELECT q.name, m.payload FROM kombu_message m JOIN kombu_queue q ON m.queue_id = q.id")
        out = []
        for queue, payload in rows:
            msg = json.loads(payload)
            out.append((queue, msg["headers"]["task"], json.loads(msg["headers"]["argsrepr"].replace("'", '"'))))
        return out


class TestSubmit:
    def test_yaml_is_recorded_and_sent_to_the_broker(self, client, orchestrator):
        res = client.post("/runs", content=yaml.safe_dump(CASCADE), headers=YAML_HEADERS)
        assert res.status_code == 201, res.text
        run = res.json()
        assert res.headers["location"] == f"/runs/{run['id']}"
        assert (run["name"], run["status"], run["stages_total"], run["steps_total"]) == ("small", "pending", 4, 8)
        assert [s["status"] for s in run["stages"]] == ["pending"] * 4
        assert queued_tasks(orchestrator) == [("control", "cascade.control.advance", [run["id"]])]

    def test_json_is_accepted(self, client):
        res = client.post("/runs", json=CASCADE)
        assert res.status_code == 201 and res.json()["config"]["stages"][0]["name"] == "if-rl"

    def test_invalid_cascade_is_422_with_every_problem(self, client, core):
        bad = {**CASCADE, "stages": [{**CASCADE["stages"][0], "batch_size": 0, "domains": ["chess"]}]}
        res = client.post("/runs", content=yaml.safe_dump(bad), headers={"content-type": "text/yaml"})
        assert res.status_code == 422
        body = res.json()
        assert body["detail"] == f"invalid cascade: {len(body['problems'])} problem(s)"
        assert any(p.startswith("body: stages[0].batch_size:") for p in body["problems"])
        assert any(p.startswith("body: stages[0].domains[0]:") and "'chess'" in p for p in body["problems"])
        assert core.ledger.runs() == []

    def test_other_content_types_are_415(self, client):
        res = client.post("/runs", content="name: x", headers={"content-type": "text/plain"})
        assert res.status_code == 415 and "application/yaml" in res.json()["detail"]

    def test_a_broker_that_cannot_be_used_is_503_and_the_run_says_why(self, core, tmp_path):
        from services.api.core import build_core

        broken = build_core(orchestrator=OrchestratorSettings(home=tmp_path / "home", broker_url="nats://127.0.0.1:4222"))
        res = TestClient(build_app(ApiSettings(), broken)).post("/runs", json=CASCADE)
        assert res.status_code == 503 and "unsupported broker" in res.json()["detail"]
        assert core.ledger.run(1).status == "failed" and "unsupported broker" in core.ledger.run(1).error
        broken.ledger.close()


class TestReads:
    def test_list_and_get(self, client, core):
        run_id = record_run(core.ledger)
        listed = client.get("/runs").json()
        assert [(r["id"], r["status"], r["steps_done"], r["steps_total"]) for r in listed] == [(run_id, "running", 6, 8)]
        run = client.get(f"/runs/{run_id}").json()
        assert [(s["name"], s["status"], s["steps_done"]) for s in run["stages"]] == [
            ("if-rl", "succeeded", 2), ("mcqa-rl", "succeeded", 2), ("rm", "succeeded", 1), ("mopd", "running", 1)]

    def test_metrics_per_stage_and_step(self, client, core):
        run_id = record_run(core.ledger)
        got = client.get(f"/runs/{run_id}/metrics").json()
        assert got["phase_groups"] == ["generate", "score", "teacher", "train", "sync"]
        grpo_step = got["stages"][0]["steps"][0]
        assert grpo_step["phase"] == "done" and grpo_step["metrics"] == {"loss": 0.5}
        assert grpo_step["phase_seconds"] == {"generate": 2.0, "score": 0.5, "teacher": 0.0, "train": 1.5, "sync": 0.375}
        in_flight = got["stages"][3]["steps"][1]
        assert in_flight["phase"] == "scored" and in_flight["phase_seconds"]["teacher"] == 0.5

    def test_evals_across_stages(self, client, core):
        run_id = record_run(core.ledger)
        got = client.get(f"/runs/{run_id}/evals").json()
        assert [(s["name"], s["start"], s["end"]) for s in got["stages"]] == [
            ("if-rl", 0, 2), ("mcqa-rl", 2, 4), ("rm", 4, 4), ("mopd", 4, 7)]
        curve = {d["domain"]: [(p["x"], p["score"]) for p in d["points"]] for d in got["domains"]}
        assert curve == {"if": [(0, 0.2), (2, 0.6), (2, 0.6), (4, 0.4), (4, 0.4)],
                         "mcqa": [(0, 0.3), (2, 0.3), (2, 0.3), (4, 0.7), (4, 0.7)]}

    def test_teachers(self, client, core):
        run_id = record_run(core.ledger)
        got = client.get(f"/runs/{run_id}/teachers").json()
        assert got["stages"] == [{"stage_index": 3, "stage_name": "mopd", "teachers": [
            {"domain": "if", "checkpoint": "/w/v2", "score": 0.6, "remeasured_score": None, "student_score": None},
            {"domain": "mcqa", "checkpoint": "/w/v4", "score": 0.7, "remeasured_score": 0.65, "student_score": 0.62}]}]

    def test_claims_as_they_stand_provisional_until_the_run_ends(self, client, core):
        run_id = record_run(core.ledger)
        got = client.get(f"/runs/{run_id}/claims").json()
        assert got["final"] is False
        assert [(c["verdict"], c["holds"], c["evidence"]) for c in got["claims"]] == [
            ("holds", True, "if-rl/if: 0.20 → 0.60 (+0.40 [+0.31, +0.50], n=100: holds); "
                            "mcqa-rl/mcqa: 0.30 → 0.70 (+0.40 [+0.31, +0.50], n=100: holds)"),
            ("holds", True, "if: 0.60 after if-rl → 0.40 after mcqa-rl (-0.20 [-0.28, -0.13], n=100: counts)"),
            ("fails", False, "both drawn again with one fresh seed (the teacher's choosing score in brackets): "
                             "if: 0.40 vs teacher 0.60 (67%, interval [55%, 77%], n=100: fails); "
                             "mcqa: 0.62 vs teacher 0.65 [0.70] (95%, interval [90%, 100%], n=100: not shown)")]
        recovery = {f["subject"]: f for f in got["claims"][2]["figures"]}
        assert recovery["mcqa"]["kind"] == "fraction" and recovery["mcqa"]["verdict"] == "not shown"
        assert recovery["mcqa"]["low"] < 0.9 <= recovery["mcqa"]["estimate"] <= recovery["mcqa"]["high"]
        gain = got["claims"][0]["figures"][0]
        assert (gain["subject"], gain["kind"], gain["n"]) == ("if-rl/if", "change", 100) and gain["low"] > 0.05
        core.ledger.set_run_status(run_id, "succeeded")
        assert client.get(f"/runs/{run_id}/claims").json()["final"] is True

    def test_claims_of_a_run_without_per_prompt_scores_are_not_shown(self, client, core):
        """A ledger written before per-prompt scores were kept: the figures stand, no interval, nothing holds."""
        run_id = record_run(core.ledger)
        with core.ledger.engine.begin() as conn:
            conn.exec_driver_sql("DELETE FROM cascade_prompt_scores")
        got = client.get(f"/runs/{run_id}/claims").json()["claims"]
        assert [c["verdict"] for c in got] == ["not shown"] * 3
        assert got[0]["evidence"].startswith("if-rl/if: 0.20 → 0.60 (no per-prompt scores: not shown)")
        assert all(f["low"] is None and f["n"] == 0 for c in got for f in c["figures"])

    @pytest.mark.parametrize("route", RUN_ROUTES)
    def test_unknown_run_is_404(self, client, route):
        res = client.get(route.format(id=99))
        assert res.status_code == 404 and res.json()["detail"] == "run 99 is not in the ledger"

    def test_a_bad_run_id_is_422_naming_it(self, client):
        res = client.get("/runs/abc")
        assert res.status_code == 422 and res.json()["problems"][0].startswith("path.run_id:")


def test_cancel(client, core):
    run_id = record_run(core.ledger)
    res = client.post(f"/runs/{run_id}/cancel")
    assert res.status_code == 200 and res.json()["cancel_requested"] is True
    assert core.ledger.cancel_requested(run_id)
    core.ledger.set_run_status(run_id, "cancelled")
    again = client.post(f"/runs/{run_id}/cancel")
    assert again.status_code == 409 and "already cancelled" in again.json()["detail"]
    assert client.post("/runs/99/cancel").status_code == 404


def test_healthz(client):
    assert client.get("/healthz").json() == {"status": "ok"}


def test_prometheus_metrics_are_read_from_the_ledger_at_scrape_time(client, core):
    run_id = record_run(core.ledger)
    client.get("/runs")
    first = samples(client.get("/metrics").text)
    run = str(run_id)
    assert first[("cascade_orchestrator_run_steps_done", (("run", run),))] == 6
    assert first[("cascade_orchestrator_run_steps_planned", (("run", run),))] == 8
    assert first[("cascade_orchestrator_stage_steps_done", (("run", run), ("stage", "mopd")))] == 1
    assert first[("cascade_orchestrator_domain_reward", (("domain", "if"), ("run", run)))] == 0.4
    assert first[("cascade_orchestrator_run_status", (("name", "small"), ("run", run), ("status", "running")))] == 1
    assert first[("cascade_orchestrator_runs", (("status", "running"),))] == 1
    assert first[("cascade_orchestrator_step_phase_seconds_total", (("phase", "teacher"), ("run", run)))] == 1.0
    assert first[("cascade_api_requests_total", (("code", "200"), ("method", "GET"), ("route", "/runs")))] == 1
    assert first[("cascade_api_ledger_up", ())] == 1
    core.ledger.record_eval(run_id, 3, 0, 5, "/w/v5", "if", 0.55, 4)  # a new evaluation shows at the next scrape
    assert samples(client.get("/metrics").text)[("cascade_orchestrator_domain_reward", (("domain", "if"), ("run", run)))] == 0.55


def test_the_latest_train_inference_mismatch_is_a_gauge_per_stat(client, core):
    run_id = record_run(core.ledger)
    run = str(run_id)
    before = samples(client.get("/metrics").text)
    assert not [k for k in before if k[0] == "cascade_orchestrator_train_mismatch"], "no RL step trained with them yet"
    step = next(s for s in core.ledger.steps(run_id) if (s.stage_index, s.step_index) == (3, 1))
    figures = {"mismatch_mean": 0.002, "mismatch_p99": 0.03, "mismatch_max": 0.4, "window_dropped_fraction": 0.01,
               "kl_inf_train": 0.05}
    core.ledger.advance(step.step_id, "trained", metrics={f"train/{k}": v for k, v in figures.items()})
    after = samples(client.get("/metrics").text)
    for stat, value in figures.items():
        assert after[("cascade_orchestrator_train_mismatch", (("run", run), ("stat", stat)))] == value


def test_episode_and_mismatch_routes_read_the_step_metrics(client, core):
    run_id = record_run(core.ledger)
    assert client.get(f"/runs/{run_id}/episodes").json() == {"run_id": run_id, "stages": []}, "no stage names an env"
    step = next(s for s in core.ledger.steps(run_id) if (s.stage_index, s.step_index) == (3, 1))
    core.ledger.advance(step.step_id, "trained", metrics={"train/mismatch_mean": 0.002, "train/kl_inf_train": 0.05})
    got = client.get(f"/runs/{run_id}/mismatch").json()
    assert got["latest"] == {"mismatch_mean": 0.002, "kl_inf_train": 0.05}
    assert [(s["stage_index"], [p["step_index"] for p in s["points"]]) for s in got["stages"]] == [(3, [1])]
    assert client.get("/runs/999/episodes").status_code == 404 and client.get("/runs/999/mismatch").status_code == 404


def samples(text: str) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_openapi_documents_typed_responses_and_the_bearer_scheme(client):
    schema = client.get("/openapi.json").json()
    assert {"RunDetail", "RunSummary", "RunMetrics", "RunEvals", "RunTeachers", "ErrorBody"} <= set(schema["components"]["schemas"])
    evals = schema["paths"]["/runs/{run_id}/evals"]["get"]["responses"]
    assert evals["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/RunEvals")
    assert evals["404"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")
    submit = schema["paths"]["/runs"]["post"]
    assert {"application/yaml", "text/yaml", "application/json"} <= set(submit["requestBody"]["content"])
    assert schema["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert schema["paths"]["/healthz"]["get"]["security"] == []


class TestToken:
    TOKEN = "t0ken-for-tests"

    @pytest.fixture
    def secured(self, core) -> TestClient:
        return TestClient(build_app(ApiSettings(host="0.0.0.0", token=self.TOKEN), core))

    @pytest.mark.parametrize("path", ["/runs", "/runs/1", "/metrics", "/openapi.json", "/", "/page/app.js"])
    def test_every_route_but_healthz_needs_it(self, secured, path):
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": f"Basic {self.TOKEN}"}):
            res = secured.get(path, headers=headers)
            assert res.status_code == 401, (path, headers)
            assert res.headers["www-authenticate"].startswith("Bearer")
        assert secured.get("/healthz").status_code == 200

    def test_the_right_token_opens_reads_and_writes(self, secured):
        auth = {"authorization": f"Bearer {self.TOKEN}"}
        assert secured.get("/runs", headers=auth).status_code == 200
        assert secured.post("/runs", json=CASCADE, headers=auth).status_code == 201

    def test_the_page_cookie_reads_but_never_writes(self, secured):
        res = secured.get(f"/?token={self.TOKEN}&run=3", follow_redirects=False)
        assert res.status_code == 303 and res.headers["location"] == "/?run=3"
        cookie = res.headers["set-cookie"]
        assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
        assert secured.get("/runs").status_code == 200  # the client keeps the cookie
        assert secured.get("/").status_code == 200
        assert secured.post("/runs", json=CASCADE).status_code == 401

    def test_a_wrong_page_token_sets_nothing(self, secured):
        res = secured.get("/?token=nope", follow_redirects=False)
        assert res.status_code == 401 and "set-cookie" not in res.headers
        assert secured.get("/runs").status_code == 401
        assert samples(secured.get("/metrics", headers={"authorization": f"Bearer {self.TOKEN}"}).text)[
            ("cascade_api_requests_total", (("code", "401"), ("method", "GET"), ("route", "unauthenticated")))] == 2


def test_the_page_and_its_assets_are_served_and_load_nothing_from_elsewhere(client):
    page = client.get("/")
    assert page.status_code == 200 and 'src="page/app.js"' in page.text and 'href="page/style.css"' in page.text
    for name, kind in (("app.js", "javascript"), ("charts.js", "javascript"), ("style.css", "text/css")):
        res = client.get(f"/page/{name}")
        assert res.status_code == 200 and kind in res.headers["content-type"]
    for path in PAGE_DIR.iterdir():
        text = path.read_text().replace("http://www.w3.org/2000/svg", "")  # the SVG namespace is a name, not a fetch
        assert "http://" not in text and "https://" not in text and "//cdn" not in text, path.name


def test_prometheus_exports_only_the_most_recent_runs_but_counts_all(core):
    ids = [record_run(core.ledger) for _ in range(3)]
    client = TestClient(build_app(ApiSettings(metrics_runs=2), core))
    got = samples(client.get("/metrics").text)
    exported = {dict(labels)["run"] for name, labels in got if name == "cascade_orchestrator_run_status"}
    assert exported == {str(i) for i in ids[1:]}
    assert got[("cascade_orchestrator_runs", (("status", "running"),))] == 3
    assert got[("cascade_orchestrator_runs", (("status", "failed"),))] == 0


# ------------------------------------------------------------- the body limit, over a real socket
@pytest.fixture
def served(core):
    """The app under uvicorn on a loopback socket (the TestClient reads a whole request body first)."""
    import threading

    import uvicorn

    from services.api.__main__ import bind

    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(build_app(ApiSettings(), core), log_config=None, access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        thread.join(0.02)
    yield sock.getsockname()[1]
    server.should_exit = True
    thread.join(10)


def _send_until_answered(port: int, head: bytes, piece: bytes, most: int) -> tuple[bytes, int]:
    """Send `head`, then `piece` repeatedly up to `most` bytes, stopping once the server answers; (answer, bytes sent)."""
    import select
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(head)
        sent = 0
        while sent < most and not select.select([conn], [], [], 0)[0]:
            try:
                conn.sendall(piece)
            except OSError:  # the server closed its side after answering
                break
            sent += len(piece)
        answer = b""
        while select.select([conn], [], [], 10)[0]:
            more = conn.recv(65536)
            if not more:
                break
            answer += more
            head_end = answer.find(b"\r\n\r\n")
            length = re.search(rb"content-length: (\d+)", answer[:head_end], re.IGNORECASE) if head_end >= 0 else None
            if length and len(answer) >= head_end + 4 + int(length.group(1)):
                break
        return answer, sent


def test_a_body_declared_over_the_limit_is_refused_before_it_is_read(served):
    head = (b"POST /runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/yaml\r\n"
            b"Content-Length: 52428800\r\n\r\n")
    answer, sent = _send_until_answered(served, head, b"#" * 65536, most=65536)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"52428800 bytes (Content-Length)" in answer and b"CASCADE_API_MAX_BODY_KB" in answer


def test_a_chunked_body_is_refused_once_it_passes_the_limit_not_after_it_ends(served):
    head = b"POST /runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/yaml\r\nTransfer-Encoding: chunked\r\n\r\n"
    data = b"#" * 262144
    piece = f"{len(data):x}\r\n".encode() + data + b"\r\n"
    answer, sent = _send_until_answered(served, head, piece, most=50 << 20)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert sent < 16 << 20, f"the server read {sent} bytes of a body over its 1 MiB limit before answering"
