"""code verifier: programs run in the real sandbox against stdin/stdout and assert tests."""

import pytest

from services.common.sandbox.isolation import Limits
from services.common.sandbox.sandbox import Sandbox, SandboxFailure
from services.reward.verifiers.base import Context, VerifyOptions
from services.reward.verifiers.code import code_reward, extract_program, same_output
from tests.reward.helpers import task

IO_TESTS = [{"input": "1 2\n", "output": "3\n"}, {"input": "10 -4\n", "output": "6"}]
ASSERT_TESTS = [{"assert": "add(1, 2) == 3"}, {"assert": "assert add(-1, 1) == 0"}]


@pytest.fixture(scope="module")
def ctx():
    box = Sandbox(workers=2, limits=Limits(cpu_s=2, memory_mb=256, nproc=8, fsize_mb=1, wall_s=2), base_uid=62100)
    yield Context(options=VerifyOptions(code_timeout_s=2.0), sandbox=box)
    box.close()


def fenced(code):
    return f"Here is my solution.\n```python\n{code}\n```\nIt works."


class TestCode:
    @pytest.mark.parametrize(
        "tests, program, verdict",
        [
            (IO_TESTS, "a, b = map(int, input().split())\nprint(a + b)", "correct"),
            (IO_TESTS, "a, b = map(int, input().split())\nprint(a + b, '  ')\nprint()", "correct"),  # whitespace
            (IO_TESTS, "a, b = map(int, input().split())\nprint(a * b if a == 1 else a + b)", "incorrect"),
            (IO_TESTS, "a, b = map(int, input().split())\nprint(a - b)", "incorrect"),
            (IO_TESTS, "print(1/0)", "incorrect"),
            (IO_TESTS, "while True:\n    pass", "timeout"),
            (ASSERT_TESTS, "def add(a, b):\n    return a + b", "correct"),
            (ASSERT_TESTS, "def add(a, b):\n    return a - b", "incorrect"),
            (ASSERT_TESTS, "def add(a, b):\n    return a + b\nimport sys\nsys.exit(0)", "correct"),  # exit is caught
            (ASSERT_TESTS, "import os\nprint('0 PASS\\n1 PASS')\nos._exit(0)", "incorrect"),  # cannot fake results
            (ASSERT_TESTS, "def add(a, b):\n    return a + b\nimport os\nif os.fork() == 0:\n    while True: pass",
             "incorrect"),  # leaves a process behind
            (ASSERT_TESTS, "import os, signal\nos.kill(os.getpid(), signal.SIGABRT)", "incorrect"),  # its own crash
        ],
    )
    def test_table(self, ctx, tests, program, verdict):
        out = code_reward(task("code", tests=tests), fenced(program), ctx)
        assert out.verdict == verdict, out.reason
        assert out.reward == (1.0 if verdict == "correct" else 0.0)

    def test_mixed_tests_report_each(self, ctx):
        t = task("code", tests=[IO_TESTS[0], {"assert": "1 + 1 == 2"}, {"assert": "False"}])
        program = "import sys\ndata = sys.stdin.read().split()\nif data:\n    print(int(data[0]) + int(data[1]))"
        out = code_reward(t, program, ctx)
        assert out.verdict == "incorrect"
        assert [c.passed for c in out.checks] == [True, True, False]

    def test_a_fence_left_open_is_not_a_program(self, ctx):
        """The synthetic SFT data's flaw (services/common/synth/code.py SFT_OPEN_FENCE) costs the reward."""
        from services.common.synth.code import answer_text

        program = "a, b = map(int, input().split())\nprint(a + b)"
        assert code_reward(task("code", tests=IO_TESTS), answer_text(program), ctx).reward == 1.0
        out = code_reward(task("code", tests=IO_TESTS), answer_text(program, closed=False), ctx)
        assert out.reward == 0.0 and out.verdict == "incorrect", out.reason

    def test_empty_program_is_invalid(self, ctx):
        assert code_reward(task("code", tests=IO_TESTS), "```python\n```", ctx).verdict == "invalid"

    def test_without_a_usable_sandbox_it_is_an_error(self):
        out = code_reward(task("code", tests=IO_TESTS), "print(3)", Context())
        assert out.verdict == "error" and "sandbox" in out.reason

    def test_a_failing_sandbox_is_an_error_not_the_programs_fault(self, ctx):
        class BrokenSandbox:
            usable, limits = True, ctx.sandbox.limits
            with_limits = ctx.sandbox.with_limits

            def run(self, *args, **kwargs):
                raise SandboxFailure("sandbox launcher died or hung (EOFError: ); run not judged")

            run_python = run

        for tests in (IO_TESTS, ASSERT_TESTS):
            out = code_reward(task("code", tests=tests), "print(3)", Context(options=ctx.options, sandbox=BrokenSandbox()))
            assert (out.verdict, out.reward) == ("error", 0.0) and "sandbox failure" in out.reason

    def test_last_fence_is_the_program(self):
        assert extract_program("```python\nold\n```\nbetter:\n```py\nnew\n```") == "new"
        assert extract_program("print(1)") == "print(1)"

    def test_same_output(self):
        assert same_output("1  2\n3\n\n", "1 2 3") and not same_output("12", "1 2")
