"""`cascade demo` as a user meets it, on one short demo run with its output going to a file:
it says where its run page is before the first step, the page is live while the run goes (headless
Chromium sees a curve grow), plain progress lines come at the set cadence and also go to the demo's
log, and the end names each claim and the report's paths. `--keep-serving` keeps the page up after.

One module-scoped demo serves every test here (CI pays for one). Chromium is Debian's `chromium`.
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml

from services.common.floatpath import cpu_vendor, vendor_note
from tests.e2e.test_cli_stack import CASCADE, env_for
from tests.e2e.test_run_page import DOMAIN_COLORS, chromium, colour_count, decode_png

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
EVERY_S = 2
"""--progress-every of the short demo (the default, 60, is checked in tests/cli/test_progress.py)."""
SLACK_S = 4
"""A poll (0.5 s), a slow ledger read on a loaded machine and the 1 s resolution of the timestamps."""
STAMP = re.compile(r"^(\d\d):(\d\d):(\d\d) (.*)$")


def short_cascade(model: Path) -> dict:
    sampling = {"temperature": 1.0, "max_tokens": 12, "thinking": False}
    ev = {"prompts_per_domain": 4}
    return {"name": "short", "seed": 0, "model": str(model), "data": "synthetic", "stages": [
        {"name": "sft", "type": "sft", "domains": ["mcqa", "code"], "batch_size": 4, "steps": 96, "max_seq_len": 128,
         "optimizer": {"lr": 1e-3}, "eval_every": 48, "eval": ev},  # quiet stretches of steps (several s even at
        # 0.15 s a step, the pooled trainer on a fast CPU): heartbeats with a measured rate
        {"name": "rl", "type": "grpo", "domains": ["mcqa"], "batch_size": 2, "rollouts_per_prompt": 2, "steps": 4,
         "sampling": sampling, "optimizer": {"lr": 1e-4}, "eval_every": 1, "eval": {**ev, "domains": ["mcqa", "code"]}},
    ]}


class Demo:
    def __init__(self, proc: subprocess.Popen, out: Path, home: Path):
        self.proc, self.out, self.home = proc, out, home

    def text(self) -> str:
        return self.out.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout: float) -> re.Match:
        deadline = time.monotonic() + timeout
        while True:
            found = re.search(pattern, self.text(), re.M)
            if found:
                return found
            if time.monotonic() >= deadline:
                break
            assert self.proc.poll() is None, f"demo exited ({self.proc.returncode}): {self.text()[-3000:]}"
            time.sleep(0.3)
        raise AssertionError(f"no {pattern!r} after {timeout:.0f}s: {self.text()[-3000:]}")

    @property
    def url(self) -> str:
        return self.wait_for(r"run page \(live\): (http://127\.0\.0\.1:\d+/\?token=[\w-]+)", 0).group(1)

    def api(self, path: str):
        base, token = self.url.split("/?token=")
        return httpx.get(f"{base}/{path}", headers={"Authorization": f"Bearer {token}"}, timeout=10).json()


@pytest.fixture(scope="module")
def demo(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("demo")
    config, home, out = root / "short.yaml", root / "home", root / "demo.out"
    config.write_text(yaml.safe_dump(short_cascade(tiny_model_dir)))
    with out.open("w") as sink:  # stdout is a file, as with nohup, tee or CI
        proc = subprocess.Popen([*CASCADE, "demo", "--config", str(config), "--home", str(home),
                                 "--progress-every", str(EVERY_S), "--keep-serving"],
                                env=env_for(home), stdout=sink, stderr=subprocess.STDOUT, cwd=root)
    handle = Demo(proc, out, home)
    try:
        handle.wait_for(r"run page \(live\): http", 300)
        yield handle
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def points_in(dom: str) -> int:
    return dom.count('class="pt"')


def test_the_live_page_shows_a_curve_grow_during_the_run(demo, tmp_path):
    deadline = time.monotonic() + 400
    while True:  # the run's first evaluation, while it still runs
        runs = demo.api("runs")
        if runs and runs[-1]["status"] == "running" and demo.api(f"runs/{runs[-1]['id']}/evals")["domains"]:
            break
        assert time.monotonic() < deadline and (not runs or runs[-1]["status"] in ("pending", "running")), runs
        time.sleep(0.3)
    first = chromium(tmp_path, demo.url, "--dump-dom").stdout  # the printed link itself, token and all
    assert 'class="status running"' in first, "the first look is during the run"
    seen = points_in(first)
    assert seen >= 1 and 'data-domain="mcqa"' in first, first[-2000:]
    run_id = runs[-1]["id"]
    while sum(len(d["points"]) for d in demo.api(f"runs/{run_id}/evals")["domains"]) <= seen:
        assert time.monotonic() < deadline, "no new evaluation"
        time.sleep(0.5)
    second = chromium(tmp_path, demo.url, "--dump-dom").stdout
    assert points_in(second) > seen, f"the curve did not grow: {seen} then {points_in(second)} points"


def stamped(text: str) -> list[tuple[int, str]]:
    out = []
    for line in text.splitlines():
        m = STAMP.match(line)
        if m:
            h, mi, s, rest = m.groups()
            out.append((int(h) * 3600 + int(mi) * 60 + int(s), rest))
    return out


def test_progress_lines_come_at_the_set_cadence_and_the_end_names_claims_and_paths(demo):
    demo.wait_for(r"--keep-serving: the run page stays up", 600)
    text = demo.text()
    lines = stamped(text)
    gaps = [(b[0] - a[0]) % 86400 for a, b in zip(lines, lines[1:])]
    assert len(lines) > 10 and max(gaps) <= EVERY_S + SLACK_S, f"gaps {gaps}"
    said = [rest for _t, rest in lines]
    first_step = next(i for i, s in enumerate(said) if s.startswith("stage 1/2 sft (sft, 96 steps"))
    page = next(i for i, s in enumerate(said) if s.startswith("run page (live): http://127.0.0.1:"))
    report = next(i for i, s in enumerate(said) if "the report will be written to" in s)
    assert page < report < first_step, "the page and the report's place are said before the first step"
    assert any(re.search(r"step \d+/\d+ .*left in this stage \([\d.]+ s/step measured\)", s) for s in said), \
        "no heartbeat with a measured time left:\n" + "\n".join(said)
    assert any(s.startswith("stage 2/2 rl succeeded: 4/4 steps") for s in said)
    # the end: each claim with its figures, the report's paths
    assert any(re.match(r"(holds|not shown|fails): each RL stage raises .* — rl/mcqa: [\d.]+ → [\d.]+ \(", s) for s in said)
    html = Path(re.search(r"^\S+ report: (\S+report\.html) \(open (file://\S+)\)$", text, re.M).group(1))
    assert html.exists() and "What the numbers say" in html.read_text()
    pngs = [Path(p) for p in re.findall(r"plot: (\S+\.png)$", text, re.M)]
    assert {p.name for p in pngs} == {"rewards.png", "step_times.png"} and pngs[0].stat().st_size > 10_000
    # the same plain lines in the demo's log
    log = (demo.home / "logs" / "demo.log").read_text()
    assert [line for line in text.splitlines() if STAMP.match(line)] == [line for line in log.splitlines()
                                                                            if STAMP.match(line)]
    assert "validation reward per stage" in log


def process_env(marker: str) -> dict[str, str]:
    """The environment of the live process whose environment holds `marker` (KEY=value)."""
    key, value = marker.split("=", 1)
    for proc in Path("/proc").iterdir():
        try:
            raw = (proc / "environ").read_bytes()
        except OSError:
            continue
        pairs = dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)
        if pairs.get(key) == value:
            return pairs
    raise AssertionError(f"no process with {marker}")


def test_the_demo_says_its_float_path_and_the_processes_it_starts_run_on_it(demo):
    demo.wait_for(r"--keep-serving: the run page stays up", 600)
    said = [rest for _t, rest in stamped(demo.text())]
    assert "float path: avx2 (ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2)" in said
    note = vendor_note("avx2", cpu_vendor())  # on an Intel CPU: its own draw, said once; on AMD: nothing
    assert ([s for s in said if s.startswith("note: this CPU")] == [f"note: {note}"]) if note else \
        not any(s.startswith("note: this CPU") for s in said)
    api = process_env(f"CASCADE_API_TOKEN={demo.url.split('token=')[1]}")  # the page's server, still up
    assert {k: api.get(k) for k in ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")} == \
        {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def test_keep_serving_keeps_the_page_up_until_sigterm(demo, tmp_path):
    demo.wait_for(r"--keep-serving: the run page stays up", 600)
    port = int(re.search(r":(\d+)/", demo.url).group(1))
    run = demo.api("runs")[-1]
    assert run["status"] == "succeeded" and run["steps_done"] == run["steps_total"] == 96 + 4
    assert demo.api(f"runs/{run['id']}/claims")["final"] is True
    shot = tmp_path / "final.png"  # the page after the run, as a user leaves it
    chromium(tmp_path, demo.url, f"--screenshot={shot}")
    pixels = decode_png(shot.read_bytes())  # mcqa and code may lie on one line (the short run leaves both at 0)
    assert sum(colour_count(pixels, DOMAIN_COLORS[d]) for d in ("mcqa", "code")) > 200, f"no curve in {shot}"
    demo.proc.send_signal(signal.SIGTERM)
    assert demo.proc.wait(60) == 0, demo.text()[-2000:]
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
