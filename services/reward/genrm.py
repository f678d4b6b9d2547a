"""Generative reward model (`genrm`): a judge LLM reads the conversation and rates the response.

The judge is shown a prompt built from a template (placeholders `{conversation}` and `{response}`)
that ends where the judge writes a rating on the scale 0..9. The reward is the judge's *expected*
rating under its next-token distribution over the ten digit tokens:

    s = sum_{d=0}^{9} d * p(d) / sum_{d=0}^{9} p(d),   p(d) = pi_judge("d" | judge prompt)

so a judge that hesitates between 6 and 8 gives 7, and no sampled text needs parsing (a judge
that puts no mass on any digit gives NaN, which the rlhf verifier reports as an `error` verdict).
Two judges compute it:

- `LocalJudge`: a causal-LM folder loaded here (transformers); the judge prompt is rendered with
  the judge's chat template in non-thinking mode followed by the template's answer prefix.
- `EndpointJudge`: any OpenAI-compatible server (vLLM, SGLang, a hosted API) at `endpoint`:
  one `/v1/completions` call per item with `max_tokens=1, logprobs=20` on the same rendered text;
  the digits among the returned top log-probs give p(d) (digits outside the top 20 count as 0).

Both have `score([(messages, response), ...]) -> [float, ...]`, the interface of the Bradley-Terry
`RewardModel`, so the rlhf verifier uses either. This module knows nothing of tasks or gRPC.
"""

from __future__ import annotations

import json
import math
import threading
import urllib.request
from pathlib import Path

from numpy import logaddexp

from services.common.errors import InvalidArgument

DEFAULT_TEMPLATE = """You are a strict judge of assistant replies. Read the conversation and the assistant's final reply, \
then rate how helpful, correct, honest and harmless the reply is, from 0 (worst) to 9 (best).

[Conversation]
{conversation}

[Final reply]
{response}

Answer with one digit."""
ANSWER_PREFIX = "Rating: "
DIGITS = tuple(str(d) for d in range(10))


def load_template(path: Path | None) -> str:
    """The judge template: the file at `path`, else DEFAULT_TEMPLATE; it must hold both placeholders."""
    text = DEFAULT_TEMPLATE if path is None else Path(path).read_text()
    for name in ("{conversation}", "{response}"):
        if name not in text:
            raise InvalidArgument("genrm_template", f"{path} lacks the placeholder {name}")
    return text


def render_conversation(messages: list[dict]) -> str:
    return "\n".join(f"{m['role']}: {m.get('content') or ''}" for m in messages)


def judge_question(template: str, messages: list[dict], response: str) -> str:
    """The template filled in (the judge's user turn)."""
    return template.replace("{conversation}", render_conversation(messages)).replace("{response}", response)


def expected_rating(digit_logprobs: dict[int, float]) -> float:
    """s = sum_d d p(d) / sum_d p(d) over the digits given (log-probs); NaN when none is given."""
    if not digit_logprobs:
        return math.nan
    top = max(digit_logprobs.values())
    w = {d: math.exp(lp - top) for d, lp in digit_logprobs.items()}
    return sum(d * p for d, p in w.items()) / sum(w.values())


def judge_text(tokenizer, question: str) -> str:
    """The judge prompt: the question as a user turn through the judge's chat template (non-thinking),
    then ANSWER_PREFIX; plain text when the tokenizer has no template."""
    if getattr(tokenizer, "chat_template", None):
        head = tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                             add_generation_prompt=True, enable_thinking=False)
    else:
        head = f"user: {question}\nassistant: "
    return head + ANSWER_PREFIX


def digit_token_ids(tokenizer) -> dict[int, int]:
    """Digit -> the judge's single token for it; refused when a digit is not one token."""
    ids = {}
    for d in DIGITS:
        tok = tokenizer.encode(d, add_special_tokens=False)
        if len(tok) != 1:
            raise InvalidArgument("reward_model", f"the judge's tokenizer spells the digit {d!r} as {len(tok)} tokens; "
                                  "a genrm judge needs single-token digits")
        ids[int(d)] = tok[0]
    return ids


class LocalJudge:
    """A causal-LM judge loaded from a folder: the expected rating from one forward pass per item."""

    def __init__(self, path: str | Path, template: str, device: str = "cpu", dtype: str = "float32", max_length: int = 2048):
        from services.common.modelio import load_causal_lm, load_tokenizer, resolve_uri

        directory = resolve_uri(path, "reward_model")
        self.tokenizer = load_tokenizer(directory)
        self.model = load_causal_lm(directory, device, dtype)
        self.template, self.device, self.max_length = template, device, max_length
        self.digits = digit_token_ids(self.tokenizer)
        self.path = str(directory)
        self._lock = threading.Lock()

    def prompt_ids(self, messages: list[dict], response: str) -> list[int]:
        """The judge prompt's ids, cut from the left to max_length (the answer prefix is at the end)."""
        text = judge_text(self.tokenizer, judge_question(self.template, messages, response))
        return self.tokenizer.encode(text, add_special_tokens=False)[-self.max_length:]

    def score(self, pairs: list[tuple[list[dict], str]]) -> list[float]:
        import torch

        out = []
        with self._lock, torch.inference_mode():
            for messages, response in pairs:  # one row at a time: no padding to reason about
                ids = torch.tensor([self.prompt_ids(messages, response)], device=self.device)
                logp = torch.log_softmax(self.model(input_ids=ids).logits[0, -1].float(), dim=-1)
                out.append(expected_rating({d: float(logp[t]) for d, t in self.digits.items()}))
        return out


class EndpointJudge:
    """A judge behind an OpenAI-compatible `/v1/completions` endpoint serving `model`."""

    def __init__(self, endpoint: str, model: str, template: str, tokenizer=None, api_key: str | None = None,
                 timeout_s: float = 120.0):
        self.endpoint = endpoint.rstrip("/")
        self.model, self.template, self.tokenizer = model, template, tokenizer
        self.api_key, self.timeout_s = api_key, timeout_s
        self.path = f"{self.endpoint} ({model})"

    def request(self, prompt: str) -> dict:
        body = {"model": self.model, "prompt": prompt, "max_tokens": 1, "temperature": 0.0, "logprobs": 20}
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(f"{self.endpoint}/v1/completions", json.dumps(body).encode(), headers)
        with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
            return json.loads(r.read())

    def score(self, pairs: list[tuple[list[dict], str]]) -> list[float]:
        out = []
        for messages, response in pairs:
            question = judge_question(self.template, messages, response)
            prompt = judge_text(self.tokenizer, question) if self.tokenizer is not None else f"{question}\n{ANSWER_PREFIX}"
            choice = self.request(prompt)["choices"][0]
            top = ((choice.get("logprobs") or {}).get("top_logprobs") or [{}])[0] or {}
            digits: dict[int, float] = {}
            for t, lp in top.items():  # "7" and " 7" are both the digit 7: their probabilities add
                if t.strip() in DIGITS:
                    d = int(t.strip())
                    digits[d] = float(lp) if d not in digits else float(logaddexp(digits[d], lp))
            out.append(expected_rating(digits))
        return out
