"""The generative judge (genrm): the tiny model as a local judge, an OpenAI-compatible endpoint, the
expected-rating formula, and the reward service's rlhf path scoring with a judge."""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import torch

from services.common.errors import InvalidArgument
from services.reward.genrm import (
    DEFAULT_TEMPLATE,
    EndpointJudge,
    LocalJudge,
    expected_rating,
    judge_question,
    load_template,
)

CONVO = [{"role": "user", "content": "Say something kind."}]


@pytest.mark.parametrize("logprobs, rating", [
    ({7: 0.0}, 7.0),
    ({6: math.log(0.5), 8: math.log(0.5)}, 7.0),
    ({0: math.log(0.25), 9: math.log(0.75)}, 6.75),
    ({2: -100.0, 4: -100.0}, 3.0),  # tiny masses: normalised, not underflowed
    ({}, math.nan),
])
def test_expected_rating_table(logprobs, rating):
    got = expected_rating(logprobs)
    assert (math.isnan(got) and math.isnan(rating)) or got == pytest.approx(rating)


def test_template_placeholders_and_file(tmp_path):
    assert "Say something kind." in judge_question(DEFAULT_TEMPLATE, CONVO, "You rock") and "You rock" in judge_question(DEFAULT_TEMPLATE, CONVO, "You rock")
    bad = tmp_path / "t.txt"
    bad.write_text("no placeholders")
    with pytest.raises(InvalidArgument) as err:
        load_template(bad)
    assert err.value.field == "genrm_template"
    good = tmp_path / "g.txt"
    good.write_text("C: {conversation}\nR: {response}\nDigit:")
    assert load_template(good).startswith("C: ")


@pytest.fixture(scope="module")
def judge(tiny_model_dir):
    return LocalJudge(tiny_model_dir, DEFAULT_TEMPLATE, max_length=256)


def test_tiny_model_judge_gives_its_expected_rating(judge):
    pairs = [(CONVO, "You are doing great!"), (CONVO, "Go away.")]
    scores = judge.score(pairs)
    assert all(0.0 <= s <= 9.0 for s in scores) and scores[0] != scores[1]
    assert judge.score(pairs) == scores  # deterministic
    ids = torch.tensor([judge.prompt_ids(*pairs[1])])  # by hand: the judge's next-token mass on the digits
    with torch.no_grad():
        p = torch.softmax(judge.model(input_ids=ids).logits[0, -1].float(), dim=-1)
    mass = torch.tensor([float(p[judge.digits[d]]) for d in range(10)], dtype=torch.float64)
    assert scores[1] == pytest.approx(float((mass * torch.arange(10)).sum() / mass.sum()), rel=1e-5)


class _Completions(BaseHTTPRequestHandler):
    seen: list = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append((self.path, self.headers.get("Authorization"), body))
        top = {"7": math.log(0.5), " 7": math.log(0.25), "9": math.log(0.25), "Hello": -0.1}
        out = json.dumps({"choices": [{"text": "7", "logprobs": {"top_logprobs": [top]}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


def test_endpoint_judge_reads_the_top_logprobs():
    server = HTTPServer(("127.0.0.1", 0), _Completions)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        judge = EndpointJudge(f"http://127.0.0.1:{server.server_port}", "judge-model", DEFAULT_TEMPLATE, api_key="k")
        (score,) = judge.score([(CONVO, "You rock")])
    finally:
        server.shutdown()
    assert score == pytest.approx(7 * 0.75 + 9 * 0.25)  # "7" and " 7" add up
    path, auth, body = _Completions.seen[-1]
    assert path == "/v1/completions" and auth == "Bearer k"
    assert (body["model"], body["max_tokens"], body["logprobs"]) == ("judge-model", 1, 20) and "You rock" in body["prompt"]


def test_reward_service_scores_rlhf_with_a_judge(tiny_model_dir):
    from services.reward.config import RewardConfig
    from services.reward.core import RewardCore
    from services.reward.verifiers.base import Context
    from services.reward.verifiers.rlhf import rlhf_reward
    from tests.reward.helpers import task

    core = RewardCore(RewardConfig(reward_model_kind="genrm", reward_model=tiny_model_dir, reward_model_max_length=256,
                                   verify_workers=1, max_parallel=1, sandbox_workers=1))
    try:
        assert isinstance(core.reward_model, LocalJudge)
        out = rlhf_reward(task("rlhf"), "hello there", Context(reward_model=core.reward_model))
        assert out.verdict == "correct" and 0.0 <= out.reward <= 9.0
        assert out.reward == pytest.approx(core.reward_model.score([([{"role": "user", "content": "q"}], "hello there")])[0])
    finally:
        core.close()
