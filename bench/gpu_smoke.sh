#!/usr/bin/env bash
# GPU smoke test of the vllm backends (policy and teacher), run by hand on a machine with a CUDA GPU:
#   bash bench/gpu_smoke.sh            (PYTHON=... to choose the interpreter, TOL=... the log-prob tolerance)
# It installs the `vllm` extra, builds the tiny model, then with vLLM: generates with sampled-token
# log-probs, loads new checksummed weights, and compares every log-prob with the hf backend (the
# transformers forward of the same tokens), for the policy and for the teacher. Exit 0 = all agree.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
export TOL=${TOL:-2e-3}
"$PYTHON" -m pip install -q -e '.[vllm]'
"$PYTHON" - <<'PY'
import os, shutil, tempfile
from pathlib import Path

import numpy as np
import torch

from services.common.checksum import sha256_dir
from services.common.tinymodel import init_model
from services.policy.backends.base import SamplingConfig
from services.policy.config import PolicyConfig
from services.policy.core import Chat, PolicyCore
from services.teacher.config import TeacherConfig
from services.teacher.core import TeacherCore

tol = float(os.environ["TOL"])
work = Path(tempfile.mkdtemp(prefix="cascade-gpu-smoke-"))
base = init_model(work / "v0", preset="tiny", seed=0)
newer = work / "v1"  # same tokenizer and shape, other weights
shutil.copytree(base, newer)
from transformers import AutoModelForCausalLM

m = AutoModelForCausalLM.from_pretrained(str(base), local_files_only=True)
with torch.no_grad():
    for prm in m.parameters():
        prm.add_(torch.randn_like(prm) * 0.5)
m.save_pretrained(newer, safe_serialization=True)


def hf_logprobs(model, prompt, tokens):
    ids = torch.tensor([list(prompt) + list(tokens)], device=model.device)
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float(), -1)
    return logp.gather(-1, ids[0, len(prompt):, None])[:, 0].cpu().numpy()


def check(name, got, ref):
    err = float(np.max(np.abs(np.asarray(got) - np.asarray(ref)), initial=0.0))
    print(f"{name}: max |vllm - hf| = {err:.2e}")
    assert err < tol, f"{name}: log-probs differ by {err} > {tol}"


vllm = PolicyCore.build(PolicyConfig(model=str(base), backend="vllm", dtype="float32", gpu_memory_utilization=0.3, enforce_eager=True))
hf = PolicyCore.build(PolicyConfig(model=str(base), backend="hf", device="cuda", dtype="float32"))
prompts = [Chat([{"role": "user", "content": "What is 17 + 25?"}]), [5, 6, 7, 8]]
params = SamplingConfig(max_tokens=32, temperature=1.0, seed=0)
result = vllm.generate(prompts, 4, params, thinking=True)
print("policy vllm sample 0:", repr(result.samples[0].text[:80]), result.samples[0].finish_reason)
for i, s in enumerate(result.samples):
    assert len(s.token_ids) == len(s.logprobs) > 0
    check(f"policy sample {i}", s.logprobs, hf_logprobs(hf.backend.model, result.prompt_token_ids[i // 4], s.token_ids))

seconds = vllm.load_weights(1, str(newer), sha256_dir(newer))
hf.load_weights(1, str(newer), sha256_dir(newer))
print(f"policy vllm load_weights: {seconds:.2f}s, version {vllm.weight_version}")
after = vllm.generate(prompts, 2, params, thinking=True)
assert after.weight_version == 1
for i, s in enumerate(after.samples):
    check(f"policy after load, sample {i}", s.logprobs, hf_logprobs(hf.backend.model, after.prompt_token_ids[i // 2], s.token_ids))

tv = TeacherCore(TeacherConfig(backend="vllm", dtype="float32", gpu_memory_utilization=0.2))
th = TeacherCore(TeacherConfig(backend="hf", device="cuda", dtype="float32"))
for core in (tv, th):
    core.load_teacher("math", str(base))
p = [np.asarray(x, np.int32) for x in result.prompt_token_ids]
c = [np.asarray(s.token_ids, np.int32) for s in result.samples]
idx = [i // 4 for i in range(len(c))]
a, b = tv.score("math", p, c, idx, top_k=4), th.score("math", p, c, idx, top_k=4)
for i, (x, y) in enumerate(zip(a.scores, b.scores)):
    check(f"teacher completion {i}", x.logprobs, y.logprobs)
    check(f"teacher top-4 {i}", x.topk_logprobs, y.topk_logprobs)
shutil.rmtree(work)
print("gpu smoke: OK")
PY
