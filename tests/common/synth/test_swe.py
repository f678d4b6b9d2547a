"""SWE tasks: the failing test really fails, and the reference patch (applied with `patch -p1`
and with `git apply`) makes it pass while the pass_to_pass tests keep passing."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from services.common.synth import swe
from services.common.tasks import TaskRecord


def _one_task_per_bug() -> list[TaskRecord]:
    """A task for every bug template, at a mix of levels."""
    found: dict[str, TaskRecord] = {}
    rng = random.Random(0)
    while len(found) < len(swe.BUGS):
        rec = swe.make_tasks(rng, 1, "validation")[0]
        bug = rec.patch_tests["fail_to_pass"][0].split("::test_")[1]
        found.setdefault(bug, rec)
    return [found[b] for b in sorted(found)]


TASKS = _one_task_per_bug()


def _checkout(rec: TaskRecord, root: Path) -> Path:
    for rel, text in rec.repo["files"].items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _pytest(root: Path, ids: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *ids],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


@pytest.mark.parametrize("rec", TASKS, ids=[r.patch_tests["fail_to_pass"][0].split("::")[1] for r in TASKS])
def test_reference_patch_fixes_the_failing_test(rec, tmp_path):
    root = _checkout(rec, tmp_path)
    f2p, p2p = rec.patch_tests["fail_to_pass"], rec.patch_tests["pass_to_pass"]
    before = _pytest(root, f2p)
    assert before.returncode == 1, before.stdout
    (root / "fix.diff").write_text(rec.reference_patch)
    applied = subprocess.run(
        ["patch", "-p1", "-i", "fix.diff"], cwd=root, capture_output=True, text=True, check=False, timeout=30
    )
    assert applied.returncode == 0, applied.stdout + applied.stderr
    after = _pytest(root, f2p + p2p)
    assert after.returncode == 0, after.stdout
    assert f"{len(f2p) + len(p2p)} passed" in after.stdout


def test_reference_patch_applies_with_git_apply(tmp_path):
    for i, rec in enumerate(TASKS):
        root = _checkout(rec, tmp_path / str(i))
        (root / "fix.diff").write_text(rec.reference_patch)
        check = subprocess.run(
            ["git", "apply", "--check", "fix.diff"], cwd=root, capture_output=True, text=True, check=False
        )
        assert check.returncode == 0, check.stderr
        subprocess.run(["git", "apply", "fix.diff"], cwd=root, check=True, timeout=30)
        path = next(p for p in rec.repo["files"] if p.startswith("pkg/") and p != "pkg/__init__.py")
        assert (root / path).read_text() != rec.repo["files"][path]


def test_answer_is_the_patch_in_a_diff_fence_and_levels_add_helpers():
    for r in swe.make_sft(random.Random(1), 30):
        assert r["messages"][-1]["content"].split("</think>\n\n")[-1].startswith("```diff\n--- a/pkg/")
    for rec in swe.make_tasks(random.Random(2), 30, "validation"):
        assert len(rec.patch_tests["pass_to_pass"]) == rec.metadata["level"] - 1
