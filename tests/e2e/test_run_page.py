"""The run page in headless Chromium: a screenshot and the rendered DOM of a realistic run.

The API is the production composition (build_core over an embedded ledger, build_app, uvicorn on
a loopback socket); the ledger is filled through the Ledger API with a seven-stage cascade whose
evaluations tell the paper's story (a domain learnt, forgotten by a later stage, recovered by MOPD)
and whose steps carry per-phase timings. Chromium is Debian's `chromium` package (.ci/servers.sh
ensure_chromium); nothing is installed at test time.
"""

from __future__ import annotations

import math
import shutil
import struct
import subprocess
import threading
import time
import zlib
from pathlib import Path

import httpx
import numpy as np
import pytest
import uvicorn

from services.api.__main__ import bind
from services.api.app import build_app
from services.api.config import ApiSettings
from services.api.core import build_core
from services.orchestrator.cascade_config import CascadeConfig
from services.orchestrator.config import OrchestratorSettings
from services.orchestrator.ledger import Ledger

pytestmark = pytest.mark.e2e

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
WIDTH, HEIGHT = 1280, 1500
DOMAIN_COLORS = {"if": (0x59, 0xA1, 0x4F), "mcqa": (0xF2, 0x8E, 0x2B), "structured": (0xB0, 0x7A, 0xA1),
                 "tool": (0x9C, 0x75, 0x5F), "code": (0xE1, 0x57, 0x59), "rlhf": (0xFF, 0x9D, 0xA7)}
"""charts.js DOMAIN_COLORS of the domains this run evaluates."""
PHASE_COLORS = {"generate": (0x6B, 0xAE, 0xD6), "train": (0x74, 0xC4, 0x76), "teacher": (0x9E, 0x9A, 0xC8)}
"""charts.js PHASE_COLORS of phases every RL / MOPD step has."""

GRPO = {"batch_size": 8, "rollouts_per_prompt": 4, "optimizer": {"lr": 1e-4}, "eval_every": 2}
STAGES = [
    {"name": "sft", "type": "sft", "domains": ["if", "mcqa", "structured", "tool", "code", "rlhf"], "batch_size": 16,
     "steps": 8, "optimizer": {"lr": 1e-3}, "eval": {"domains": ["if", "mcqa", "structured", "tool", "code"]}},
    {"name": "if-rl", "type": "grpo", "domains": ["if"], "steps": 6, **GRPO,
     "eval": {"domains": ["if", "mcqa", "structured", "tool"]}},
    {"name": "multi-domain-rl", "type": "grpo", "domains": ["mcqa", "structured", "tool"], "steps": 6, **GRPO,
     "eval": {"domains": ["if", "mcqa", "structured", "tool"]}},
    {"name": "mopd", "type": "mopd", "domains": ["if", "mcqa", "structured", "tool"], "teachers": "auto",
     "batch_size": 8, "rollouts_per_prompt": 2, "steps": 6, "optimizer": {"lr": 1e-4}, "eval_every": 2},
    {"name": "reward-model", "type": "rm", "domains": ["rlhf"], "output": "demo-rm", "batch_size": 8, "steps": 4,
     "optimizer": {"lr": 5e-4}},
    {"name": "rlhf", "type": "grpo", "domains": ["rlhf"], "reward_model": "demo-rm", "steps": 4, **GRPO},
    {"name": "code-rl", "type": "grpo", "domains": ["code"], "steps": 4, **GRPO},
]


def reward(domain: str, stage: int, step: int) -> float:
    """A made-up but paper-shaped curve: each stage lifts its own domains; multi-domain RL makes `if`
    forget what if-rl taught; MOPD brings it back. Deterministic, in [0, 1]."""
    progress = (step + 1) / STAGES[stage]["steps"] if step >= 0 else 0.0
    base = {"if": 0.30, "mcqa": 0.25, "structured": 0.35, "tool": 0.20, "code": 0.15, "rlhf": 0.40}[domain]
    learnt = {"if": (1, 0.35), "mcqa": (2, 0.30), "structured": (2, 0.25), "tool": (2, 0.35), "code": (6, 0.30),
              "rlhf": (5, 0.20)}[domain]
    score = base + 0.05 * math.sin(stage + step)
    if stage > learnt[0] or stage == learnt[0]:
        score += learnt[1] * (1.0 if stage > learnt[0] else progress)
    if domain == "if" and stage == 2:
        score -= 0.25 * progress  # forgetting
    if domain == "if" and stage >= 3:
        score -= 0.25 * (1.0 - (progress if stage == 3 else 1.0))  # MOPD recovery
    return round(min(1.0, max(0.0, score)), 4)


def fill_ledger(ledger: Ledger, model: str) -> int:
    """Record a run through the Ledger API: stages 0-5 done, stage 6 two steps in (one more in flight)."""
    config = CascadeConfig.model_validate({"name": "demo", "model": model, "stages": STAGES}).model_dump(mode="json")
    run_id = ledger.create_run("demo", config)
    ledger.set_run_status(run_id, "running")
    version = 0
    for s, st in enumerate(STAGES):
        ledger.begin_stage(run_id, s, st["name"], st["type"], st["steps"], start_weight_version=version)
        evals = st.get("eval", {}).get("domains", st["domains"])
        if st["type"] == "mopd":
            for d in st["domains"]:
                best = max((e for e in ledger.evals(run_id, domain=d)), key=lambda e: e.score)
                ledger.record_teacher(run_id, s, d, best.checkpoint, best.score)
        last_step = 2 if s == len(STAGES) - 1 else st["steps"] - 1
        for k in range(-1, last_step + 1):
            if k >= 0:
                version = record_step(ledger, run_id, s, k, st["type"], version)
            due = k == -1 or k == st["steps"] - 1 or (st.get("eval_every") and (k + 1) % st["eval_every"] == 0)
            if st["type"] != "rm" and due and not (s == len(STAGES) - 1 and k == last_step):
                for d in evals:
                    score = reward(d, s, k)  # 50 prompts around it (mean `score`): the claims get intervals
                    ledger.record_eval(run_id, s, k, version, f"/runs/1/weights/v{version}", d, score, 16,
                                       {f"p{i}": score + 0.1 * (i % 5 - 2) for i in range(50)})
        if s < len(STAGES) - 1:
            ledger.set_stage_status(run_id, s, "succeeded")
    return run_id


def record_step(ledger: Ledger, run_id: int, stage: int, step: int, kind: str, version: int) -> int:
    """One step through its phases with seconds per phase; the last step of the run stops at `scored`."""
    record = ledger.begin_step(run_id, stage, step)
    jitter = 0.2 * math.sin(3 * stage + step)
    phases = {"sft": [("trained", 0.9 + jitter), ("published", 0.2), ("synced", 0.3)],
              "rm": [("trained", 0.6 + jitter), ("published", 0.1)],
              "grpo": [("generated", 2.2 + jitter), ("scored", 0.5), ("trained", 1.1), ("published", 0.2), ("synced", 0.3)],
              "mopd": [("generated", 1.6 + jitter), ("scored", 0.9), ("trained", 1.1), ("published", 0.2), ("synced", 0.3)]}
    in_flight = stage == len(STAGES) - 1 and step == 2
    for phase, seconds in phases[kind]:
        if in_flight and phase == "trained":
            return version
        if phase == "published" and kind != "rm":
            version += 1
            ledger.record_weight_version(run_id, version, f"/runs/1/weights/v{version}", f"{version:064x}")
        ledger.advance(record.step_id, phase, seconds=seconds, weight_version=version if phase == "published" else None,
                       metrics={"loss": 1.0 / (step + 2)} if phase == "trained" else None)
    ledger.advance(record.step_id, "done")
    return version


TOKEN = "page-token-for-tests"


def serve(app) -> tuple[uvicorn.Server, threading.Thread, str]:
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    return server, thread, f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture(scope="module")
def api_core(tmp_path_factory):
    home = tmp_path_factory.mktemp("api-home")
    core = build_core(orchestrator=OrchestratorSettings(home=home))
    core.home = home
    yield core
    core.ledger.close()


@pytest.fixture(scope="module")
def served(api_core, tmp_path_factory):
    """The API over a filled embedded ledger, served by uvicorn on loopback: once open, once with a token."""
    run_id = fill_ledger(api_core.ledger, str(api_core.home / "model"))
    servers = [serve(build_app(ApiSettings(), api_core)), serve(build_app(ApiSettings(token=TOKEN), api_core))]
    yield servers[0][2], run_id, tmp_path_factory.mktemp("chromium"), servers[1][2]
    for server, thread, _url in servers:
        server.should_exit = True
        thread.join(10)


def chromium(out_dir: Path, url: str, *action: str, height: int = HEIGHT) -> subprocess.CompletedProcess:
    profile = out_dir / f"profile-{time.monotonic_ns()}"
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}", f"--window-size={WIDTH},{height}", "--virtual-time-budget=5000",
            "--hide-scrollbars", *action, url]
    env = {"HOME": str(out_dir), "PATH": "/usr/bin:/bin", "XDG_CONFIG_HOME": str(out_dir), "XDG_CACHE_HOME": str(out_dir)}
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=out_dir,
                          check=False)


def decode_png(data: bytes) -> np.ndarray:
    """RGB(A) 8-bit non-interlaced PNG -> (height, width, channels) uint8 (the shape Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    width, height, depth, color, _c, _f, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, f"unexpected PNG format {header}"
    bpp = 3 if color == 2 else 4
    raw = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(height, 1 + width * bpp)
    out = np.zeros((height, width * bpp), np.uint8)
    prev = np.zeros(width * bpp, np.int32)
    for y in range(height):
        kind, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        if kind == 0:
            cur = line
        elif kind == 2:
            cur = (line + prev) & 0xFF
        elif kind == 1:
            cur = np.cumsum(line.reshape(-1, bpp), axis=0).reshape(-1) & 0xFF
        else:
            cur = _sequential(kind, line.tolist(), prev.tolist(), bpp)
        out[y] = cur
        prev = np.asarray(cur, np.int32)
    return out.reshape(height, width, bpp)


def _sequential(kind: int, line: list[int], prev: list[int], bpp: int) -> list[int]:
    """PNG filters 3 (average) and 4 (Paeth), which depend on the byte just decoded."""
    cur = [0] * len(line)
    for i, v in enumerate(line):
        a = cur[i - bpp] if i >= bpp else 0
        b = prev[i]
        if kind == 3:
            cur[i] = (v + (a + b) // 2) & 0xFF
            continue
        c = prev[i - bpp] if i >= bpp else 0
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        cur[i] = (v + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
    return cur


def colour_count(pixels: np.ndarray, rgb: tuple[int, int, int]) -> int:
    return int(np.all(pixels[..., :3] == np.array(rgb, np.uint8), axis=-1).sum())


def test_the_api_serves_what_the_page_draws(served):
    url, run_id, _out, _secured = served
    evals = httpx.get(f"{url}/runs/{run_id}/evals").json()
    assert [s["name"] for s in evals["stages"]] == [s["name"] for s in STAGES]
    assert {d["domain"] for d in evals["domains"]} == set(DOMAIN_COLORS)
    ifc = next(d for d in evals["domains"] if d["domain"] == "if")["points"]
    best_if = max(p["score"] for p in ifc if p["stage_index"] == 1)
    after_md = [p["score"] for p in ifc if p["stage_index"] == 2][-1]
    after_mopd = [p["score"] for p in ifc if p["stage_index"] == 3][-1]
    assert after_md < best_if - 0.1 and after_mopd > 0.9 * best_if, "the filled run tells forgetting and recovery"


def test_screenshot_shows_one_line_per_domain_and_the_phase_bars(served):
    url, run_id, out, _secured = served
    shot = out / "run.png"
    done = chromium(out, f"{url}/?run={run_id}&refresh=0", f"--screenshot={shot}")
    assert shot.exists(), f"no screenshot: rc={done.returncode} {done.stderr[-2000:]}"
    pixels = decode_png(shot.read_bytes())
    assert pixels.shape[:2] == (HEIGHT, WIDTH)
    distinct = len(np.unique(pixels[..., :3].reshape(-1, 3), axis=0))
    assert distinct > 200, f"the page looks blank ({distinct} colours)"
    for domain, rgb in DOMAIN_COLORS.items():
        # a legend swatch is ~50 pixels of the colour; a line with its markers adds hundreds more
        assert colour_count(pixels, rgb) > 200, f"no line drawn for {domain}"
    for phase, rgb in PHASE_COLORS.items():
        assert colour_count(pixels, rgb) > 300, f"no {phase} bars drawn"


def test_dom_names_every_stage_and_domain(served):
    url, run_id, out, _secured = served
    done = chromium(out, f"{url}/?run={run_id}&refresh=0", "--dump-dom", "--enable-logging=stderr", "--v=0")
    dom = done.stdout
    assert "<svg" in dom, f"charts not drawn: rc={done.returncode} {done.stderr[-2000:]}"
    errors = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    assert errors == [], "the page logged to the console (a script error?)"
    for stage in STAGES:
        assert f"{STAGES.index(stage) + 1}. {stage['name']}" in dom, stage["name"]
    for domain in DOMAIN_COLORS:
        assert f'data-domain="{domain}"' in dom, domain
    assert dom.count('class="domain"') == len(DOMAIN_COLORS), "one line per domain"
    assert f"run {run_id} · demo" in dom and 'class="status running"' in dom


def test_with_a_token_the_page_opens_through_its_cookie(served):
    _url, run_id, out, secured = served
    refused = chromium(out, f"{secured}/?run={run_id}&refresh=0", "--dump-dom")
    assert "missing or wrong bearer token" in refused.stdout and "multi-domain-rl" not in refused.stdout
    opened = chromium(out, f"{secured}/?token={TOKEN}&run={run_id}&refresh=0", "--dump-dom")
    assert "3. multi-domain-rl" in opened.stdout and 'data-domain="if"' in opened.stdout, opened.stderr[-2000:]


def test_each_stage_gets_its_own_segment_rlhf_its_own_panel_and_teachers_are_ringed(served):
    """SFT's steps must not squeeze the RL stages: the stage boundaries split the x axis evenly; the
    reward-model-scored domain sets its own y scale; each MOPD teacher is ringed on its source curve."""
    import re

    url, run_id, out, _secured = served
    dom = chromium(out, f"{url}/?run={run_id}&refresh=0", "--dump-dom").stdout
    charts = re.findall(r'<div id="(rewards|timings)" class="chart">(.*?)</div>', dom, re.S)
    assert [name for name, _ in charts] == ["rewards", "timings"], "both charts drawn"
    for name, svg in charts:
        boundaries = [float(x) for x in re.findall(r'<line class="boundary" x1="([\d.]+)"', svg)]
        assert len(boundaries) >= len(STAGES) - 1, name
        gaps = [b - a for a, b in zip(boundaries, boundaries[1:len(STAGES) - 1])]
        assert max(gaps) - min(gaps) < 1.0, f"{name}: stages do not share the axis evenly: {gaps}"
    rewards = charts[0][1]
    panels = re.findall(r"<svg[^>]*>.*?</svg>", rewards, re.S)
    assert len(panels) == 2 and "rm-panel" in panels[1].split(">", 1)[0], "a second panel for the reward model"
    assert 'data-domain="rlhf"' in panels[1] and 'data-domain="rlhf"' not in panels[0]
    assert all(f'data-domain="{d}"' in panels[0] for d in ("if", "mcqa", "structured", "tool", "code"))
    assert ">1.00<" in panels[0] and ">0.00<" in panels[0], "the 0-1 domains keep a 0..1 scale"
    mopd = STAGES.index(next(s for s in STAGES if s["type"] == "mopd"))
    assert rewards.count('class="teacher"') == len(STAGES[mopd]["domains"]), "one ring per MOPD teacher"
    assert "What the numbers say" in dom and dom.count("<li class=") >= 2, "the claims are listed"
    assert re.search(r"95 % interval \[[+-][\d.]+, [+-][\d.]+\], n=50\): (holds|not shown|fails)", dom), \
        "each claim's figures with their intervals"


# ------------------------------------------------------------------ a multi-turn run's own figures
AGENT_STEPS = 3
AGENT_STAGES = [{"name": "agent-grpo", "type": "grpo", "domains": ["workbench"], "env": "workbench", "max_turns": 3,
                 "max_episode_tokens": 1536, "batch_size": 2, "rollouts_per_prompt": 2, "steps": AGENT_STEPS,
                 "sampling": {"temperature": 1.0, "max_tokens": 24, "thinking": False}, "optimizer": {"lr": 1e-3}}]
EPISODE_COLORS = {"turns_mean": (0x1B, 0x9E, 0x77), "tool_errors": (0xD9, 0x5F, 0x02)}
MISMATCH_COLORS = {"mismatch_mean": (0x31, 0x82, 0xBD), "mismatch_p99": (0xE6, 0x55, 0x0D), "mismatch_max": (0x75, 0x6B, 0xB1)}
"""app.js EPISODE_SERIES and MISMATCH_SERIES colours."""


def train_logprobs(model, out: dict, sampling) -> list[list[float]]:
    """log π_train of every token of each trajectory, as the trainer takes it: one forward of the whole
    row, the sampling's filtered logits (services.common.logits), 0 at the first token."""
    import torch

    from services.common.logits import filter_logits

    rows = []
    with torch.no_grad():
        for ids in out["input_ids"]:
            x = torch.tensor([ids])
            z = filter_logits(model(x).logits[0, :-1], sampling.temperature, sampling.top_k, sampling.top_p)
            lp = torch.log_softmax(z, dim=-1).gather(1, x[0, 1:, None])[:, 0]
            rows.append([0.0, *lp.tolist()])
    return rows


def record_multiturn_run(ledger: Ledger, model_dir: Path) -> tuple[int, list[dict], list[dict]]:
    """A GRPO stage on workbench episodes, each step's figures produced by the real parts: the tiny model's
    PolicyCore rolls out G episodes per task on a real EnvCore (episodes.run_episodes); the figures are
    episode_metrics and reward_metrics of its output; the mismatch is services.trainer.mismatch over the
    policy's log π_inf and a forward of the same rows. Returns the run id, each step's episodes output
    and its mismatch figures."""
    import random

    from services.common.modelio import load_causal_lm, load_tokenizer
    from services.common.synth.multiturn import workbench
    from services.env.config import EnvConfig
    from services.env.core import EnvCore
    from services.env.server import EnvServicer
    from services.orchestrator.cascade_schema import SamplingConfig
    from services.orchestrator.episodes import EpisodeLimits, episode_metrics, run_episodes
    from services.orchestrator.steps.rollouts import reward_metrics
    from services.policy.config import PolicyConfig
    from services.policy.core import PolicyCore
    from services.policy.server import PolicyServicer
    from services.trainer import mismatch
    from tests.orchestrator.steps.conftest import InProcess

    st = AGENT_STAGES[0]
    config = CascadeConfig.model_validate({"name": "agents", "model": str(model_dir), "stages": AGENT_STAGES})
    run_id = ledger.create_run("agents", config.model_dump(mode="json"))
    ledger.set_run_status(run_id, "running")
    ledger.begin_stage(run_id, 0, st["name"], st["type"], st["steps"], start_weight_version=0)
    sampling, limits = SamplingConfig(**st["sampling"]), EpisodeLimits(st["max_turns"], st["max_episode_tokens"], 60.0)
    tokenizer, model = load_tokenizer(str(model_dir)), load_causal_lm(str(model_dir))
    policy = InProcess(PolicyServicer(PolicyCore.build(PolicyConfig(model=str(model_dir)))))
    core = EnvCore(EnvConfig(sandbox_workers=1, sandbox_base_uid=63800, tool_timeout_s=3.0))
    outs, figures = [], []
    try:
        for k in range(AGENT_STEPS):
            tasks = workbench.make_tasks(random.Random(k), st["batch_size"], "train")
            out = run_episodes(policy, InProcess(EnvServicer(core)), tokenizer, "workbench", tasks,
                               st["rollouts_per_prompt"], sampling, limits, seed=k)
            import torch

            pieces = [mismatch.collect(torch.tensor([t]), torch.tensor([i]), torch.tensor([m]))
                      for t, i, m in zip(train_logprobs(model, out, sampling), out["logprobs"], out["loss_mask"])]
            found = mismatch.summarize(mismatch.combine(pieces))
            record = ledger.begin_step(run_id, 0, k)
            ledger.advance(record.step_id, "generated", seconds=out["seconds"],
                           metrics={"samples": len(out["verdicts"]), **episode_metrics(out)})
            ledger.advance(record.step_id, "scored", seconds=0.01,
                           metrics=reward_metrics({"rewards": out["rewards"], "verdicts": out["verdicts"]}))
            ledger.advance(record.step_id, "trained", seconds=0.5, metrics={f"train/{s}": v for s, v in found.items()})
            ledger.record_weight_version(run_id, k + 1, f"/runs/{run_id}/weights/v{k + 1}", f"{k + 1:064x}")
            ledger.advance(record.step_id, "published", seconds=0.1, weight_version=k + 1)
            ledger.advance(record.step_id, "done")
            outs.append(out)
            figures.append(found)
    finally:
        core.close_all()
    return run_id, outs, figures


@pytest.fixture(scope="module")
def multiturn(served, api_core, tiny_model_dir):
    run_id, outs, figures = record_multiturn_run(api_core.ledger, tiny_model_dir)
    return served[0], run_id, served[2], outs, figures


def test_the_episode_and_mismatch_panels_show_the_runs_own_figures(multiturn):
    """What the browser shows in the new panels is what the run's steps measured: the episodes' turns,
    tool errors, env seconds and verdicts summed over the steps' outputs, and the last step's mismatch."""
    import re
    from collections import Counter

    url, run_id, out_dir, outs, figures = multiturn
    episodes = [v for out in outs for v in out["turns"]]
    api = httpx.get(f"{url}/runs/{run_id}/episodes").json()["stages"]
    assert [(s["stage_name"], s["env"], len(s["steps"])) for s in api] == [("agent-grpo", "workbench", AGENT_STEPS)]
    st = api[0]
    assert st["episodes"] == len(episodes) and st["turns_mean"] == pytest.approx(np.mean(episodes))
    assert st["tool_errors"] == sum(e for out in outs for e in out["tool_errors"])
    assert st["env_seconds"] == pytest.approx(sum(s for out in outs for s in out["env_seconds"]))
    assert st["verdicts"] == dict(sorted(Counter(v for out in outs for v in out["verdicts"]).items()))
    mismatch = httpx.get(f"{url}/runs/{run_id}/mismatch").json()
    assert mismatch["latest"] == pytest.approx(figures[-1]) and len(mismatch["stages"][0]["points"]) == AGENT_STEPS

    done = chromium(out_dir, f"{url}/?run={run_id}&refresh=0", "--dump-dom", "--enable-logging=stderr", "--v=0")
    dom = done.stdout
    assert [line for line in done.stderr.splitlines() if ":CONSOLE" in line] == [], "the page logged to the console"
    section = re.search(r'<section id="episodes-section">(.*?)</section>', dom, re.S)
    assert section, f"the episodes panel is not shown: {done.stderr[-2000:]}"
    row = re.search(r'<tr data-stage="0">(.*?)</tr>', section.group(1), re.S).group(1)
    cells = [float(v) for v in re.findall(r'data-value="([^"]+)"', row)]
    assert cells[:4] == [AGENT_STEPS, st["episodes"], pytest.approx(st["turns_mean"]), st["tool_errors"]]
    assert cells[4] == pytest.approx(st["env_seconds"])
    shown = re.search(r'<td class="verdicts">(.*?)</td>', row).group(1)
    assert shown == " · ".join(f"{v} {n}" for v, n in st["verdicts"].items() if n > 0)
    assert section.group(1).count('class="series"') == len(EPISODE_COLORS)
    assert section.group(1).count('class="pt"') >= AGENT_STEPS, "a point per step of turns per episode"
    panel = re.search(r'<section id="mismatch-section">(.*?)</section>', dom, re.S)
    assert panel, "the mismatch panel is not shown"
    stats = dict(re.findall(r'data-stat="(\w+)" data-value="([^"]+)"', panel.group(1)))
    assert {k: float(v) for k, v in stats.items()} == pytest.approx(figures[-1])
    assert "3 · agent-grpo" not in dom and "1. agent-grpo · step 3" in dom

    shot = out_dir / "agents.png"
    chromium(out_dir, f"{url}/?run={run_id}&refresh=0", f"--screenshot={shot}", height=2000)
    pixels = decode_png(shot.read_bytes())
    for name, rgb in {**EPISODE_COLORS, **MISMATCH_COLORS}.items():
        assert colour_count(pixels, rgb) > 100, f"no {name} line drawn (p99 is dashed over max where they meet)"
