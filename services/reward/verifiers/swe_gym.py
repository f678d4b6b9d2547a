"""`swe` for NeMo Gym rows (SWE-RL, NeMo Gym's `swerl_gen`): SEARCH/REPLACE edits inside `<solution>`.

The answer's `<solution>...</solution>` holds fenced blocks
```` ```python\\n### path\\n<<<<<<< SEARCH\\n old lines\\n=======\\n new lines\\n>>>>>>> REPLACE\\n``` ````.
Each SEARCH text must appear (at a line start) in that file of `metadata.relevant_file_contents`
and differ from its REPLACE text; edits apply back to front; the changed files become a unified
diff. No solution, a block that does not apply or no change at all is reward 0 without running
anything, as in NeMo Gym. A patch that applies is run against the instance's FAIL_TO_PASS and
PASS_TO_PASS tests: in our sandbox when the record carries the test files and names no image, else
the verdict is `error` naming the container image its tests need (never a silent 0). This module
knows nothing about how the sandbox isolates.
"""

from __future__ import annotations

import difflib
import re
from types import SimpleNamespace
from typing import Any

from services.common.nemo_gym import swe_fields
from services.reward.verifiers.base import Check, Context, Outcome, error, invalid

_FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.DOTALL)
_PYTHON_FENCE = re.compile(r"```python\n(.*?)\n```", re.DOTALL)


class EditError(ValueError):
    """An edit block that does not apply (its SEARCH text is absent, or equals its REPLACE text)."""


def solution_text(answer: str) -> str | None:
    """The text inside the first `<solution>...</solution>`, stripped; None when either tag is missing."""
    if "<solution>" not in answer or "</solution>" not in answer:
        return None
    return answer.split("<solution>", 1)[1].split("</solution>", 1)[0].strip()


def parse_edits(text: str) -> dict[str, list[tuple[str, str]]]:
    """path -> [(search, replace)] from the fenced `### path` SEARCH/REPLACE blocks, repeats dropped."""
    edits: dict[str, list[tuple[str, str]]] = {}
    pattern = re.compile(r"### (.*?)\s*\n<<<<<<< SEARCH\n(.*?)\n=======\n(.*?)\n>>>>>>> REPLACE\s*\Z", re.DOTALL)
    for block in _FENCE.findall(text):
        m = pattern.match(block.rstrip("\n"))
        if m is None:
            continue
        path, pair = m.group(1).strip(), (m.group(2), m.group(3))
        if pair not in edits.setdefault(path, []):
            edits[path].append(pair)
    return edits


def apply_edits(files: dict[str, str], edits: dict[str, list[tuple[str, str]]]) -> dict[str, str]:
    """New text of each edited file; EditError when a SEARCH text is missing or changes nothing."""
    out = {}
    for path, pairs in edits.items():
        text = "\n" + files.get(path, "")
        spots = []
        for search, replace in pairs:
            if search == replace:
                raise EditError(f"{path}: SEARCH and REPLACE are identical")
            at = text.find("\n" + search)
            if at < 0:
                raise EditError(f"{path}: SEARCH text not found: {search[:80]!r}")
            spots.append((at, search, replace))
        for at, search, replace in sorted(spots, reverse=True):
            text = text[:at] + "\n" + replace + text[at + 1 + len(search):]
        out[path] = text[1:]
    return out


def unified_diff(files: dict[str, str], new: dict[str, str], drop_first_dir: bool = False) -> str:
    """A git-style diff (a/ b/ prefixes) of the changed files; "" when nothing changed."""
    parts = []
    for path, text in new.items():
        name = path.split("/", 1)[1] if drop_first_dir and "/" in path else path
        body = list(difflib.unified_diff(files.get(path, "").splitlines(), text.splitlines(),
                                         f"a/{name}", f"b/{name}", lineterm=""))
        if body:
            parts.append(f"diff --git a/{name} b/{name}\n" + "\n".join(body) + "\n")
    return "".join(parts)


def swe_gym_reward(task: Any, answer: str, ctx: Context) -> Outcome:
    """NeMo Gym's SWE reward: 0 for a solution that yields no patch, else the instance's tests decide."""
    f = swe_fields(task)
    where = f"image {f['image']}" if f["image"] else "an image (the record names none)"
    if f["mode"] == "repro-gen":
        if not _PYTHON_FENCE.search(answer):
            return invalid("no ```python reproduction test in the response")
        return error(f"repro-gen: the reproduction test of {f['instance_id']} runs in the SWE container, {where}; not run here")
    solution = solution_text(answer)
    if solution is None:
        return invalid("no <solution>...</solution> block")
    edits = parse_edits(solution)
    try:
        new = apply_edits(f["files"], edits)
    except EditError as exc:
        return invalid(f"edit does not apply: {exc}")
    diff = unified_diff(f["files"], new, f["remove_repo_name"])
    if not diff:
        return invalid("the solution changes nothing (no SEARCH/REPLACE block applies a change)")
    check = Check("patch", True, f"{len(new)} file(s) changed")
    tests = f["fail_to_pass"] + f["pass_to_pass"]
    paths = {p.split("/", 1)[1] if f["remove_repo_name"] and "/" in p else p for p in f["files"]}
    missing = sorted({t.split("::")[0] for t in tests} - paths)
    if f["image"] or missing:
        need = f"the SWE container image {f['image']}" if f["image"] else f"the test files {missing[:3]}"
        return error(f"patch extracted; the tests of {f['instance_id']} need {need}, which this machine lacks: not run", [check])
    from services.reward.verifiers.swe import swe_reward  # the sandboxed pytest run of our own SWE tasks

    files = f["files"]
    if f["remove_repo_name"]:  # the record's paths start with the repo's name; the diff's and the tests' do not
        files = {p.split("/", 1)[1]: t for p, t in files.items() if "/" in p}
    tests_of = {"fail_to_pass": f["fail_to_pass"], "pass_to_pass": f["pass_to_pass"]}
    shim = SimpleNamespace(repo={"files": files}, patch_tests=tests_of)
    return swe_reward(shim, f"```diff\n{diff}```", ctx)
