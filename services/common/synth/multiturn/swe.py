"""Synthetic agentic SWE tasks: the single-turn swe domain's tiny repositories with an off-by-one bug,
asked as an agent task (find the bug with the file and test tools, fix it by replacing text, then
answer without a tool call). The judge runs the task's tests on its own copies of the test files."""

from __future__ import annotations

import random

from services.common.synth import swe as single_turn

PROMPT = ("The tests of this repository fail. Use the tools to find the bug in pkg/ (list_files, read_file, "
          "run_tests), fix it with replace_in_file, then reply 'fixed' without a tool call.")


def make_tasks(rng: random.Random, n: int, split: str) -> list[dict]:
    out = []
    for k, record in enumerate(single_turn.make_tasks(rng, n, split)):
        out.append({"id": f"swe-{split}-{k}", "environment": "swe",
                    "messages": [{"role": "user", "content": PROMPT}],
                    "repo": record.repo, "patch_tests": record.patch_tests, "reference_patch": record.reference_patch})
    return out
