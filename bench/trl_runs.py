"""The TRL side of the comparison: GRPOTrainer and GKDTrainer (λ = 1) runs with per-phase timers.

    .venv/bin/python bench/trl_runs.py grpo|grpo_vllm|gkd SPEC.json OUT.json

Run as its own process by `bench/trl_compare.py` (as Cascade's services are), so the two sides
never share a Python heap or torch's thread pool. SPEC holds the shapes (prompts per step B, group
size G, max new tokens T, steps, learning rate, seed), the model folders and the prompts of every
step in order; OUT gets one record per optimizer step (wall seconds, seconds per phase, generated
tokens, mean reward) and the folder of the final weights. Phases are measured by wrapping TRL's
own methods: GRPO `_generate` (sampling), `_calculate_rewards` (verifier), the rest of
`_generate_and_score_completions` (tokenising, advantages) and the optimizer step (the remainder);
GKD `generate_on_policy_outputs` (sampling), the teacher's forward pass, and the remainder (student
forward + loss + backward + step). This module knows nothing about Cascade's services.
"""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from transformers import TrainerCallback  # noqa: E402

from services.common.tasks import TaskRecord  # noqa: E402


class Timers:
    """Seconds spent per phase in the current step; `wrap(obj, name, phase)` times a method."""

    def __init__(self):
        self.now: dict[str, float] = defaultdict(float)
        self.tokens = 0

    def wrap(self, obj, name: str, phase: str, count_tokens=None) -> None:
        inner = getattr(obj, name)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            out = inner(*args, **kwargs)
            self.now[phase] += time.perf_counter() - start
            if count_tokens is not None:
                self.tokens += count_tokens(out)
            return out

        setattr(obj, name, timed)


class StepLog(TrainerCallback):
    """One record per optimizer step: seconds since the previous step ended (since its own start for
    the first: the same measure as Cascade's ledger), the phase timers, tokens and the logged reward."""

    def __init__(self, timers: Timers):
        self.timers, self.records, self._last = timers, [], None

    def on_step_begin(self, args, state, control, **kw):
        self.timers.now.clear()
        self.timers.tokens = 0
        if self._last is None:
            self._last = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
        now = time.perf_counter()
        self.records.append({"step": state.global_step - 1, "seconds": now - self._last,
                             "phases": dict(self.timers.now), "tokens": self.timers.tokens})
        self._last = now

    def on_log(self, args, state, control, logs=None, **kw):
        if logs and "reward" in logs and self.records:
            self.records[-1]["reward_mean"] = float(logs["reward"])


def verifier_reward(prompts, completions, task_json, **_):
    """TRL reward function: each completion scored by its task's verifier, in-process."""
    from trl_models import score_responses

    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return score_responses([TaskRecord.from_json(t) for t in task_json], texts)


def common_args(spec: dict, out_dir: Path) -> dict:
    return {"output_dir": str(out_dir), "report_to": "none", "logging_steps": 1, "save_strategy": "no",
            "max_steps": spec["steps"], "gradient_accumulation_steps": 1, "learning_rate": spec["lr"],
            "lr_scheduler_type": "constant", "warmup_steps": 0, "weight_decay": 0.0, "max_grad_norm": 1.0,
            "use_cpu": True, "seed": spec["seed"], "dataloader_num_workers": 0, "disable_tqdm": True,
            # Like Cascade's trainer on CPU: fp32, no activation checkpointing (TRL defaults both on; on a
            # 2.5M-parameter model on CPU they only cost time).
            "bf16": False, "gradient_checkpointing": False}


VLLM_COLOCATE = {"use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.15,
                 "vllm_enable_sleep_mode": False, "vllm_max_model_length": 1024,
                 "vllm_importance_sampling_correction": False}
"""TRL's own vLLM path, in its one-process form (vLLM's engine inside the trainer's process; on CPU the
memory fraction is of host memory, as Cascade's vLLM engines take it). Strictly on-policy like the rest,
and no importance-sampling correction (Cascade's `tis_cap` is off by default too)."""


def run_grpo(spec: dict, out_dir: Path, vllm: dict | None = None) -> list[dict]:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    b, g = spec["prompts_per_step"], spec["group"]
    rows = [{"prompt": r["messages"], "task_json": r["task_json"]} for r in spec["records"]]
    args = GRPOConfig(**common_args(spec, out_dir), per_device_train_batch_size=b * g, num_generations=g,
                      steps_per_generation=1, max_completion_length=spec["max_tokens"], temperature=1.0, top_p=1.0,
                      top_k=0, beta=0.0, loss_type="dapo", scale_rewards="group", mask_truncated_completions=False,
                      shuffle_dataset=False, chat_template_kwargs={"enable_thinking": False},
                      log_completions=False, **(vllm or {"use_vllm": False}))
    timers = Timers()
    log = StepLog(timers)
    trainer = GRPOTrainer(model=spec["model"], reward_funcs=verifier_reward, args=args,
                          train_dataset=Dataset.from_list(rows), callbacks=[log])
    timers.wrap(trainer, "_generate", "generate",
                count_tokens=lambda out: sum(len(c) for c in out[1]))
    timers.wrap(trainer, "_calculate_rewards", "reward")
    timers.wrap(trainer, "_generate_and_score_completions", "rollout_total")
    trainer.train()
    trainer.save_model(str(out_dir / "final"))
    return log.records


def run_gkd(spec: dict, out_dir: Path) -> list[dict]:
    from datasets import Dataset
    from trl.experimental.gkd import GKDConfig, GKDTrainer

    from services.common.chat_template import render
    from services.common.modelio import load_causal_lm, load_tokenizer

    tok = load_tokenizer(spec["model"])
    b, g = spec["prompts_per_step"], spec["group"]
    rows = []
    for r in spec["records"]:  # the G samples of a prompt are G rows (GKD samples one completion per row)
        prompt = render(tok, r["messages"], thinking=False)
        rows += [{"prompt": prompt, "messages": r["messages"] + [{"role": "assistant", "content": ""}]}] * g
    args = GKDConfig(**common_args(spec, out_dir), per_device_train_batch_size=b * g, lmbda=1.0, beta=1.0,
                     temperature=1.0, max_new_tokens=spec["max_tokens"], shuffle_dataset=False, max_length=1024)
    teacher = load_causal_lm(spec["teacher"])
    timers = Timers()
    log = StepLog(timers)
    trainer = GKDTrainer(model=spec["model"], teacher_model=teacher, args=args, processing_class=tok,
                         train_dataset=Dataset.from_list(rows), callbacks=[log])
    def generated(out):
        return int((out[2] != -100).sum())

    timers.wrap(trainer, "generate_on_policy_outputs", "generate", count_tokens=generated)
    timers.wrap(trainer.teacher_model, "forward", "teacher")
    trainer.train()
    trainer.save_model(str(out_dir / "final"))
    return log.records


def run_grpo_vllm(spec: dict, out_dir: Path) -> list[dict]:
    return run_grpo(spec, out_dir, vllm=VLLM_COLOCATE)


RUNS = {"grpo": run_grpo, "grpo_vllm": run_grpo_vllm, "gkd": run_gkd}


def main() -> None:
    kind, spec_path, out_path = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    spec = json.loads(spec_path.read_text())
    import torch

    torch.manual_seed(spec["seed"])
    started = time.perf_counter()
    records = RUNS[kind](spec, out_path.parent / f"{out_path.stem}-trainer")
    out_path.write_text(json.dumps({"records": records, "final": str(out_path.parent / f"{out_path.stem}-trainer" / "final"),
                                    "seconds": time.perf_counter() - started, "torch_threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
