"""The launcher structure: runs are started by single-threaded launcher processes, never by the
(threaded) caller; a launcher that dies is replaced and the run fails as the sandbox's fault; a
run that dies before its program started is a launch failure, a program's own signal is not."""

import os
import resource
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from services.common.sandbox import launcher
from services.common.sandbox.isolation import Limits, _rlimits, find_processes
from services.common.sandbox.launcher import LaunchFailed, RunRequest, execute
from services.common.sandbox.sandbox import Sandbox, SandboxFailure

BASE_UID = 62500
LIMITS = Limits(cpu_s=2, memory_mb=256, nproc=8, fsize_mb=1, nofile=32, wall_s=5.0)


@pytest.fixture
def sandbox():
    root = Path(f"/var/lib/cascade/sandbox-launcher-test-{os.getpid()}")
    box = Sandbox(workers=1, limits=LIMITS, base_uid=BASE_UID, root=root)
    assert box.isolation == "namespace", box.problem
    yield box
    box.close()
    shutil.rmtree(root, ignore_errors=True)
    assert alive(BASE_UID) == []


def alive(uid: int) -> list[int]:
    """Live processes of `uid` (a zombie re-parented to init is dead; init reaps it in its own time)."""
    return [pid for pid, state, _ in find_processes(uid, None) if state != "Z"]


def threads_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("Threads:")[1].split()[0])


def test_runs_are_children_of_a_single_threaded_launcher(sandbox):
    threading.Thread(target=time.sleep, args=(2,), daemon=True).start()  # the caller is threaded
    r = sandbox.run_python("import os\nprint(os.getppid())")
    (pid,) = sandbox.launcher_pids
    assert int(r.stdout) == pid != os.getpid()
    assert threads_of(pid) == 1


def test_address_space_limit_is_set_last():
    assert _rlimits(Limits())[-1][0] == resource.RLIMIT_AS


def test_a_program_killed_by_its_own_signal_is_its_result(sandbox):
    r = sandbox.run_python("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
    assert r.signal_name == "SIGSEGV" and not r.ok


def test_a_program_that_cannot_be_started_is_a_sandbox_failure(sandbox):
    with pytest.raises(SandboxFailure, match="could not start '/no/such/program'"):
        sandbox.run(["/no/such/program"])
    assert sandbox.run_python("print('still serving')").ok


def test_a_dead_launcher_is_replaced_and_its_run_swept(sandbox):
    errors = []

    def run():
        try:
            sandbox.run_python("import time\ntime.sleep(30)")
        except SandboxFailure as exc:
            errors.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    deadline = time.monotonic() + 10
    while not alive(BASE_UID) and time.monotonic() < deadline:
        time.sleep(0.01)
    (old,) = sandbox.launcher_pids
    os.kill(old, signal.SIGKILL)
    worker.join(10)
    assert len(errors) == 1 and "died or hung" in str(errors[0])
    assert sandbox.launcher_pids != [old]
    r = sandbox.run_python("print('fresh')")  # the new launcher first sweeps what the old one left
    assert r.stdout.strip() == "fresh" and alive(BASE_UID) == []


class TestExecute:
    """`execute` on its own (in this process, unisolated: uid None), with a sabotaged fence."""

    def request(self, tmp_path, argv):
        return RunRequest(argv=argv, root=str(tmp_path), limits=LIMITS)

    def test_a_run_that_dies_in_the_fence_is_a_launch_failure(self, tmp_path, monkeypatch):
        def crashing_preexec(limits, uid, ready_fd=None):
            return lambda: os.kill(os.getpid(), signal.SIGKILL)  # not SEGV: faulthandler would print

        monkeypatch.setattr(launcher, "build_preexec", crashing_preexec)
        with pytest.raises(LaunchFailed, match="before its program started .*SIGKILL"):
            execute(self.request(tmp_path, ["true"]))
        assert list(tmp_path.iterdir()) == []

    def test_a_fence_that_raises_is_a_launch_failure(self, tmp_path, monkeypatch):
        def raising_preexec(limits, uid, ready_fd=None):
            def preexec():
                raise OSError(1, "unshare refused")
            return preexec

        monkeypatch.setattr(launcher, "build_preexec", raising_preexec)
        with pytest.raises(LaunchFailed, match="could not start 'true'"):
            execute(self.request(tmp_path, ["true"]))

    def test_a_complete_fence_gives_the_programs_result(self, tmp_path):
        result, left = execute(self.request(tmp_path, ["sh", "-c", "kill -ABRT $$"]))
        assert result.signal_name == "SIGABRT" and left == []
