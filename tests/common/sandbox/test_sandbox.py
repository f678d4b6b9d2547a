"""The sandbox under attack: each hostile program is contained, leaves nothing behind, and the
sandbox keeps working. Limits are tiny (8 processes, 256 MiB, 1 CPU second, 2 s wall) so the
whole suite stays bounded on a small shared machine."""

import os
import shutil
import signal
from pathlib import Path

import pytest

from services.common.sandbox.isolation import Limits, find_processes
from services.common.sandbox.sandbox import Sandbox

BASE_UID = 62000
LIMITS = Limits(cpu_s=1, memory_mb=256, nproc=8, fsize_mb=1, nofile=32, wall_s=2.0)


@pytest.fixture(scope="module")
def sandbox():
    root = Path(f"/var/lib/cascade/sandbox-test-{os.getpid()}")  # own root: other runs may share the default
    box = Sandbox(workers=2, limits=LIMITS, base_uid=BASE_UID, root=root)
    assert box.isolation == "namespace", box.problem  # this machine runs tests as root with namespaces
    yield box
    box.close()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(autouse=True)
def nothing_left_behind(sandbox):
    yield
    for uid in (BASE_UID, BASE_UID + 1):
        left = find_processes(uid, None)
        assert left == [], f"processes of uid {uid} survived: {left}"
    assert not any(sandbox.root.glob("run-*")), "a run directory was not removed"


def run(sandbox, code, **kw):
    return sandbox.run_python(code, **kw)


class TestBasics:
    def test_stdin_stdout_and_exit_code(self, sandbox):
        r = run(sandbox, "import sys\nprint(input()[::-1])\nsys.exit(3)", stdin="hello\n")
        assert (r.stdout, r.returncode, r.timed_out) == ("olleh\n", 3, False)

    def test_runs_as_its_own_uid_with_a_scrubbed_env(self, sandbox):
        os.environ["CASCADE_TEST_SECRET"] = "s3cr3t"
        try:
            r = run(sandbox, "import os\nprint(os.getuid())\nprint(sorted(os.environ))")
        finally:
            del os.environ["CASCADE_TEST_SECRET"]
        uid, env = r.stdout.splitlines()
        assert int(uid) in (BASE_UID, BASE_UID + 1)
        assert "CASCADE_TEST_SECRET" not in env and "PATH" in env

    def test_files_are_written_for_the_run(self, sandbox):
        r = sandbox.run(["{python}", "-c", "print(open('data/x.txt').read())"], files={"data/x.txt": "payload"})
        assert r.stdout.strip() == "payload"

    def test_paths_may_not_escape(self, sandbox):
        with pytest.raises(ValueError, match="leaves the working directory"):
            sandbox.run(["true"], files={"../evil": "x"})


class TestAdversarial:
    def test_fork_bomb(self, sandbox):
        r = run(sandbox, "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n")
        assert r.timed_out and not r.ok

    def test_memory_bomb(self, sandbox):
        r = run(sandbox, "chunks = []\nwhile True:\n    chunks.append(bytearray(10**7))\n")
        assert r.returncode != 0 and "MemoryError" in r.stderr

    def test_infinite_loop_hits_the_cpu_limit(self, sandbox):
        r = run(sandbox, "while True:\n    pass\n")
        assert r.signal_name in ("SIGKILL", "SIGXCPU") or r.timed_out

    def test_busy_child_outliving_its_parent_is_killed(self, sandbox):
        r = run(sandbox, "import os\nif os.fork() == 0:\n    while True:\n        pass\nprint('parent done')\n")
        assert r.returncode == 0 and r.survivors >= 1

    def test_daemonised_process_is_found_by_uid(self, sandbox):
        code = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
                "        time.sleep(60)\n    os._exit(0)\nprint('bye')\n")
        r = run(sandbox, code)
        assert r.survivors >= 1

    def test_ignoring_sigterm_does_not_help(self, sandbox):
        r = run(sandbox, "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    time.sleep(1)\n")
        assert r.timed_out and r.signal_name == "SIGKILL"

    def test_no_network(self, sandbox):
        code = ("import socket\nfor host in [('127.0.0.1', 22), ('1.1.1.1', 80)]:\n    try:\n"
                "        socket.create_connection(host, timeout=1)\n        print('CONNECTED')\n"
                "    except OSError as e:\n        print('blocked', e.errno)\n")
        r = run(sandbox, code)
        assert "CONNECTED" not in r.stdout and r.stdout.count("blocked") == 2

    def test_writing_outside_the_working_directory(self, sandbox, tmp_path):
        target = "/tmp/cascade-sandbox-escape-test"
        code = (f"import os\nfor p in ['{os.getcwd()}/escape.txt', '/etc/escape.txt', '{target}']:\n    try:\n"
                "        open(p, 'w').write('x')\n        print('wrote', p)\n    except OSError as e:\n"
                "        print('denied', p)\n")
        r = run(sandbox, code)
        assert "denied " + os.getcwd() in r.stdout and "denied /etc" in r.stdout
        assert not os.path.exists(target)  # /tmp inside the run is a private tmpfs
        assert not os.path.exists(os.path.join(os.getcwd(), "escape.txt"))

    def test_reading_the_services_environment(self, sandbox):
        os.environ["CASCADE_TEST_SECRET"] = "s3cr3t"
        code = (f"import os\nfound = []\nfor pid in ['{os.getpid()}', '1', 'self/../{os.getpid()}']:\n    try:\n"
                "        found.append(open(f'/proc/{pid}/environ').read())\n    except OSError:\n        pass\n"
                "print('s3cr3t' in ''.join(found), dict(os.environ).get('CASCADE_TEST_SECRET'))\n")
        try:
            r = run(sandbox, code)
        finally:
            del os.environ["CASCADE_TEST_SECRET"]
        assert r.stdout.strip() == "False None"

    def test_huge_stdout_is_cut_by_the_file_size_limit(self, sandbox):
        r = run(sandbox, "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n")
        assert not r.ok and len(r.stdout) <= 1 << 20

    def test_killing_the_parent_fails(self, sandbox):
        code = (f"import os, signal\nfor pid in [os.getppid(), {os.getpid()}, 1]:\n    try:\n"
                "        os.kill(pid, signal.SIGKILL)\n        print('killed', pid)\n    except OSError:\n"
                "        print('refused')\nos.kill(-1, signal.SIGKILL)\n")
        r = run(sandbox, code)
        assert r.stdout.count("refused") == 3

    def test_still_serving_after_the_attacks(self, sandbox):
        r = run(sandbox, "print(sum(range(10)))")
        assert r.ok and r.stdout.strip() == "45"


def test_unisolated_sandbox_refuses_unless_allowed(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    box = Sandbox(workers=1, limits=LIMITS, root=tmp_path / "root", base_uid=BASE_UID + 10)
    assert box.isolation == "none" and not box.usable
    from services.common.errors import FailedPrecondition

    with pytest.raises(FailedPrecondition, match="not running as root"):
        box.run(["true"])
    allowed = Sandbox(workers=1, limits=LIMITS, root=tmp_path / "root", allow_unisolated=True)
    r = allowed.run_python("print('ran')")
    box.close()
    allowed.close()
    assert r.stdout.strip() == "ran"


def test_signal_names():
    from services.common.sandbox.sandbox import RunResult

    assert RunResult(-signal.SIGKILL, "", "", False, 0.0).signal_name == "SIGKILL"


def test_each_reward_process_gets_its_own_block_of_slot_uids():
    """The sweep kills by uid and RLIMIT_NPROC counts per uid: two services must not share one."""
    from services.common.sandbox.sandbox import UID_BLOCK, uid_block

    blocks = {uid_block(pid) for pid in range(1, 30_001)}
    assert len(blocks) == 30_000  # distinct live pids below 30000 apart never share a block
    assert all(b >= 100_000 and (b - 100_000) % UID_BLOCK == 0 for b in blocks)
    assert max(blocks) + UID_BLOCK < 2**31 - 1024
