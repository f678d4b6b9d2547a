"""Kill every process of a running cascade (broker and ledger database too); nothing is lost, nothing applied twice.

One uninterrupted run (embedded SQLite broker, its own trainer) is the reference. The same cascade
then runs on a private Redis while, at ledger-chosen points, the policy, the reward service, the
ledger's PostgreSQL (a private cluster), the trainer, the broker, a Celery worker and one of two
teacher replicas are SIGKILLed; the supervisor restarts each (the test restarts Redis and
PostgreSQL) and the run is resumed from the ledger. Both runs keep their ledger in that PostgreSQL.
Then a published weight file gets one byte flipped: the policy refuses it (DATA_LOSS) and keeps
serving its version.
"""

from __future__ import annotations

import os
import time

import grpc
import pytest

from services.common.grpc_client import ReplicaClient
from services.common.pb import policy_pb2, policy_pb2_grpc
from tests.reliability.faults import (
    cascade_config,
    compare_runs,
    default_faults,
    exactly_once,
    run_cascade,
    start_fault_stack,
    step_table,
)
from tests.reliability.private_servers import PG_MISSING

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.redis]


@pytest.fixture(scope="module")
def stack(tmp_path_factory, tiny_model_dir):
    built = start_fault_stack(tmp_path_factory.mktemp("faults"), tiny_model_dir)
    yield built
    built.stop()


@pytest.fixture(scope="module")
def runs(stack, tiny_model_dir):
    config = cascade_config(tiny_model_dir)
    reference = run_cascade(stack, config, f"sqla+sqlite:///{stack.home}/broker-ref.sqlite", "trainer-ref", "ref")
    faulted = run_cascade(stack, config, stack.redis.url, "trainer", "faulted",
                          faults=default_faults(postgres=stack.postgres is not None))
    return config, reference, faulted


def test_the_uninterrupted_run_succeeds(runs):
    _config, reference, _faulted = runs
    assert reference.status == "succeeded"
    assert reference.resumes == 0 and "failed" not in reference.statuses_seen


def test_every_fault_fired_and_the_run_still_succeeded(runs, stack):
    _config, _reference, faulted = runs
    assert faulted.status == "succeeded", faulted.ledger.run(faulted.run_id).error
    assert all(f.fired_at is not None for f in faulted.faults)
    assert stack.redis.restarts == 1
    names = ("policy", "reward", "trainer", "teacher")
    deadline = time.monotonic() + 30  # the run can finish (fail-over) before the watcher's back-off ends
    while True:
        restarted = {name: stack.sup._procs[name].restarts for name in names}
        if all(n >= 1 for n in restarted.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert all(n >= 1 for n in restarted.values()), f"the supervisor did not restart: {restarted}"


def test_the_ledger_database_restart_failed_no_step(runs, stack):
    """kill -9 of PostgreSQL while a GRPO step trains: tasks retry until it has recovered, the run never fails."""
    if stack.postgres is None:  # .ci/servers.sh installs the server binaries: missing under CI is a failure
        (pytest.fail if os.environ.get("CI") else pytest.skip)(PG_MISSING)
    _config, _reference, faulted = runs
    assert faulted.ledger.url == stack.postgres.url
    assert stack.postgres.restarts == 1
    order = [f.target for f in faulted.faults]
    restart, after = faulted.faults[order.index("postgres")], faulted.faults[order.index("postgres") + 1]
    assert [e for t, e in faulted.failures if restart.fired_at <= t < after.fired_at] == [], faulted.failures


def test_no_step_lost_or_applied_twice(runs, stack):
    config, _reference, faulted = runs
    state = stack.trainer_state("trainer")
    counts = exactly_once(faulted.ledger, faulted.run_id, config, list(state.applied_step_ids))
    assert counts["lost"] == 0 and counts["ledger_duplicates"] == 0 and counts["applied_twice"] == 0, counts
    assert counts["applied"] == counts["expected"], counts
    assert state.global_step == counts["expected"], "a restarted trainer must continue, not start over"


def test_the_faulted_run_matches_the_uninterrupted_one(runs):
    """Same steps, same weight versions, bit-identical published weights (CPU, fixed seeds)."""
    _config, reference, faulted = runs
    ref, hit = step_table(reference.ledger, reference.run_id), step_table(faulted.ledger, faulted.run_id)
    assert all(r["sha256"] and r["loss"] is not None for r in ref + hit), "a step without weights or loss"
    diff = compare_runs(ref, hit)
    assert diff["steps"] == [] and diff["versions"] == [], diff
    assert diff["weights"] == [], f"published weights differ at steps {diff['weights']}"
    assert diff["losses"] == [], diff


def test_a_teacher_replica_killed_during_mopd_fails_no_step(runs):
    """The teacher fault is the last one: from it to the end the run never failed (calls failed over)."""
    _config, _reference, faulted = runs
    killed = next(f for f in faulted.faults if f.target == "teacher")
    mopd = [s for s in faulted.ledger.steps(faulted.run_id) if s.stage_index == 1]
    assert [s.phase for s in mopd] == ["done", "done"]
    assert [e for t, e in faulted.failures if t >= killed.fired_at] == [], faulted.failures


def test_a_flipped_byte_in_published_weights_is_refused_and_the_policy_keeps_its_version(runs, stack):
    _config, _reference, faulted = runs
    version, uri, sha = faulted.ledger.weight_versions(faulted.run_id)[-1]
    policy = ReplicaClient(stack.specs["policy"].grpc_address, policy_pb2_grpc.PolicyServiceStub)
    before = policy.call("GetInfo", policy_pb2.GetInfoRequest(), timeout=30)
    target = next(p for p in sorted(__import__("pathlib").Path(uri).glob("*.safetensors")))
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    original = target.read_bytes()
    target.write_bytes(bytes(data))
    try:
        with pytest.raises(grpc.RpcError) as err:
            policy.call("LoadWeights", policy_pb2.LoadWeightsRequest(
                weights={"version": version + 100, "uri": uri, "sha256": sha}), timeout=60)
        assert err.value.code() == grpc.StatusCode.DATA_LOSS
        assert "sha256" in err.value.details()
        after = policy.call("GetInfo", policy_pb2.GetInfoRequest(), timeout=30)
        assert after.weight_version == before.weight_version == version
        reply = policy.call("Generate", policy_pb2.GenerateRequest(
            prompts=[policy_pb2.Prompt(token_ids=b"\x05\x00\x00\x00\x06\x00\x00\x00")], n=1,
            sampling=policy_pb2.SamplingParams(max_tokens=2)), timeout=60)
        assert reply.weight_version == version
    finally:
        target.write_bytes(original)
        policy.close()
