"""swe for NeMo Gym rows: SEARCH/REPLACE edits inside <solution>, applied to the record's files and
run in the sandbox when the record carries the tests, else an `error` naming the image."""

import json

import pytest

from services.common.sandbox.isolation import Limits
from services.common.sandbox.sandbox import Sandbox
from services.reward.verifiers.base import Context, VerifyOptions
from services.reward.verifiers.swe import swe_reward
from services.reward.verifiers.swe_gym import EditError, apply_edits, parse_edits, unified_diff
from tests.reward.helpers import task
from tests.reward.test_swe import BUGGY, FILES

IMAGE = "/swebench-images/sweb.eval.x86_64.acme_s_pkg-1.sif"


def edit(path, search, replace):
    return f"```python\n### {path}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n```"


FIX = edit("pkg/util.py", "    return xs[len(xs)]", "    return xs[-1]")


def row(image=IMAGE, files=FILES, remove_repo_name=False, **instance):
    inst = {"instance_id": "acme__pkg-1", "FAIL_TO_PASS": json.dumps(["tests/test_util.py::test_last"]),
            "PASS_TO_PASS": json.dumps(["tests/test_util.py::test_double"]), **instance}
    meta = {"relevant_file_contents": json.dumps(files), "remove_repo_name": remove_repo_name}
    if image:
        meta["image"] = image
    return task("swe", instance=inst, metadata=meta, mode="eval", responses_create_params={"input": "fix it"})


@pytest.fixture(scope="module")
def sandbox_ctx():
    box = Sandbox(workers=1, limits=Limits(cpu_s=10, memory_mb=1024, nproc=16, fsize_mb=4, wall_s=10), base_uid=62400)
    yield Context(options=VerifyOptions(code_timeout_s=8.0), sandbox=box)
    box.close()


class TestEdits:
    def test_parse_and_apply(self):
        edits = parse_edits(f"Here:\n{FIX}\n{FIX}")
        assert edits == {"pkg/util.py": [("    return xs[len(xs)]", "    return xs[-1]")]}
        new = apply_edits(FILES, edits)
        assert new["pkg/util.py"] == BUGGY.replace("xs[len(xs)]", "xs[-1]")
        diff = unified_diff(FILES, new)
        assert diff.startswith("diff --git a/pkg/util.py b/pkg/util.py\n--- a/pkg/util.py\n+++ b/pkg/util.py\n")

    @pytest.mark.parametrize(
        "block", [edit("pkg/util.py", "    return nothing", "x"), edit("pkg/util.py", "def last(xs):", "def last(xs):"),
                  edit("pkg/absent.py", "a", "b")],
    )
    def test_a_block_that_does_not_apply_raises(self, block):
        with pytest.raises(EditError):
            apply_edits(FILES, parse_edits(block))


class TestReward:
    def test_no_solution_block_is_zero_without_running(self):
        out = swe_reward(row(), FIX, Context())
        assert (out.reward, out.verdict) == (0.0, "invalid") and "<solution>" in out.reason

    def test_a_solution_that_does_not_apply_is_zero(self):
        out = swe_reward(row(), f"<solution>\n{edit('pkg/util.py', 'nope', 'x')}\n</solution>", Context())
        assert (out.reward, out.verdict) == (0.0, "invalid") and "not found" in out.reason

    def test_a_patch_whose_tests_need_the_image_is_an_error_naming_it(self):
        out = swe_reward(row(), f"<solution>\n{FIX}\n</solution>", Context())
        assert out.verdict == "error" and IMAGE in out.reason

    def test_without_image_or_test_files_the_verdict_says_what_is_missing(self):
        files = {k: v for k, v in FILES.items() if not k.startswith("tests/")}
        out = swe_reward(row(image=None, files=files), f"<solution>\n{FIX}\n</solution>", Context())
        assert out.verdict == "error" and "tests/test_util.py" in out.reason

    def test_tests_in_the_record_run_in_the_sandbox(self, sandbox_ctx):
        good = swe_reward(row(image=None), f"plan</think><solution>\n{FIX}\n</solution>", sandbox_ctx)
        assert good.verdict == "correct", good.reason
        wrong = edit("pkg/util.py", "    return xs[len(xs)]", "    return xs[0]")
        bad = swe_reward(row(image=None), f"<solution>\n{wrong}\n</solution>", sandbox_ctx)
        assert bad.verdict == "incorrect" and "test_last" in bad.reason

    def test_paths_that_carry_the_repo_name(self, sandbox_ctx):
        named = {f"pkg-repo/{p}": t for p, t in FILES.items()}
        fix = edit("pkg-repo/pkg/util.py", "    return xs[len(xs)]", "    return xs[-1]")
        out = swe_reward(row(image=None, files=named, remove_repo_name=True), f"<solution>\n{fix}\n</solution>", sandbox_ctx)
        assert out.verdict == "correct", out.reason
