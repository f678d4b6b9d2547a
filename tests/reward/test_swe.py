"""swe verifier: diffs applied to a small repository, its tests run in the sandbox."""

import difflib

import pytest

from services.common.sandbox.isolation import Limits
from services.common.sandbox.sandbox import Sandbox
from services.reward.verifiers.base import Context, VerifyOptions
from services.reward.verifiers.swe import extract_diff, swe_reward
from tests.reward.helpers import task

BUGGY = "def last(xs):\n    return xs[len(xs)]\n\n\ndef double(x):\n    return x * 2\n"
FIXED = BUGGY.replace("xs[len(xs)]", "xs[-1]")
TESTS = "from pkg.util import last, double\n\n\ndef test_last():\n    assert last([1, 2, 3]) == 3\n\n\ndef test_double():\n    assert double(2) == 4\n"
FILES = {"pkg/__init__.py": "", "pkg/util.py": BUGGY, "tests/test_util.py": TESTS, "conftest.py": ""}
PATCH_TESTS = {"fail_to_pass": ["tests/test_util.py::test_last"], "pass_to_pass": ["tests/test_util.py::test_double"]}


def diff(path, old, new):
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}"))


@pytest.fixture(scope="module")
def ctx():
    box = Sandbox(workers=1, limits=Limits(cpu_s=10, memory_mb=1024, nproc=16, fsize_mb=4, wall_s=10), base_uid=62200)
    yield Context(options=VerifyOptions(code_timeout_s=8.0), sandbox=box)
    box.close()


def score(ctx, response):
    return swe_reward(task("swe", repo={"files": FILES}, patch_tests=PATCH_TESTS), response, ctx)


class TestSwe:
    def test_fix_passes(self, ctx):
        out = score(ctx, f"The index is off by one.\n```diff\n{diff('pkg/util.py', BUGGY, FIXED)}```")
        assert out.verdict == "correct", out.reason
        assert [c.passed for c in out.checks] == [True, True]

    def test_wrong_fix_fails_the_target_test(self, ctx):
        wrong = BUGGY.replace("xs[len(xs)]", "xs[0]")
        out = score(ctx, f"```diff\n{diff('pkg/util.py', BUGGY, wrong)}```")
        assert out.verdict == "incorrect" and "test_last" in out.reason

    def test_breaking_a_passing_test_fails(self, ctx):
        broken = FIXED.replace("x * 2", "x * 3")
        out = score(ctx, f"```diff\n{diff('pkg/util.py', BUGGY, broken)}```")
        assert out.verdict == "incorrect" and [c.passed for c in out.checks] == [True, False]

    def test_patch_that_does_not_apply_is_invalid(self, ctx):
        other = "def nothing():\n    pass\n"
        out = score(ctx, f"```diff\n{diff('pkg/util.py', other, other + '# x')}```")
        assert out.verdict == "invalid" and "does not apply" in out.reason

    def test_no_diff_is_invalid(self, ctx):
        assert score(ctx, "I would change the index.").verdict == "invalid"

    def test_editing_the_tests_does_not_help(self, ctx):
        cheat = diff("tests/test_util.py", TESTS, TESTS.replace("== 3", "is not None"))
        cheat += diff("conftest.py", "", "import pytest\n")
        out = score(ctx, f"```diff\n{cheat}```")
        assert out.verdict == "incorrect", out.reason

    def test_extract_diff_prefers_the_diff_fence(self):
        d = diff("a.py", "x\n", "y\n")
        assert extract_diff(f"```python\nprint()\n```\n```diff\n{d}```") == d
        assert extract_diff(d) == d and extract_diff("nothing") is None
