"""One command for the reliability report: faults, bad input and load on the tiny model.

    .venv/bin/python -m bench.reliability [--out bench/results/reliability.md]

Runs, with the helpers of tests/reliability: (1) an uninterrupted cascade (GRPO then MOPD) and the
same cascade with the policy, reward, trainer, broker (private Redis), ledger database (private
PostgreSQL), a Celery worker and one of two teacher replicas SIGKILLed along the way, then compares
them and a corrupted weight load;
(2) malformed and oversized gRPC bodies to every service; (3) property-based bad input on the
codec, task records and cascade configs; (4) concurrent load on the reward service and bursts
on policy and teacher. Writes the figures to a Markdown file. Everything runs locally on CPU.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from services.common import codec
from services.common.grpc_client import ReplicaClient
from services.common.pb import policy_pb2, policy_pb2_grpc, teacher_pb2
from services.common.tinymodel import init_model
from tests.reliability import faults, private_servers, probes

KEPT = "<!-- measured by the tests named below; kept when this script rewrites the report -->"
"""Sections after this line come from tests (tests/hosts, tests/integration/test_celery_brokers.py), not this script."""


def fault_section(home: Path, model: Path) -> tuple[list[str], dict]:
    stack = faults.start_fault_stack(home / "faults", model)
    try:
        config = faults.cascade_config(model)
        ref = faults.run_cascade(stack, config, f"sqla+sqlite:///{stack.home}/broker-ref.sqlite", "trainer-ref", "ref")
        hit = faults.run_cascade(stack, config, stack.redis.url, "trainer", "faulted",
                                 faults=faults.default_faults(postgres=stack.postgres is not None))
        ledger_db = "a private PostgreSQL" if stack.postgres else "SQLite"
        db_restarts = stack.postgres.restarts if stack.postgres else 0
        state = stack.trainer_state("trainer")
        once = faults.exactly_once(hit.ledger, hit.run_id, config, list(state.applied_step_ids))
        diff = faults.compare_runs(faults.step_table(ref.ledger, ref.run_id), faults.step_table(hit.ledger, hit.run_id))
        corrupt = corrupted_load(stack, hit)
        restarts = {n: stack.sup._procs[n].restarts for n in ("policy", "reward", "trainer", "teacher")}
    finally:
        stack.stop()
    lines = ["## Faults injected into a running cascade", "",
             f"Cascade: GRPO {config['stages'][0]['steps']} steps, then MOPD {config['stages'][1]['steps']} steps "
             f"(teachers: auto, two teacher replicas), tiny model, CPU; ledger: {ledger_db}.", "",
             "| fault | where it fired | at (s) |", "|---|---|---|"]
    lines += [f"| SIGKILL {f.target} | {f.point} | {f.fired_at:.1f} |" for f in hit.faults]
    survived = hit.status == "succeeded"
    lines += ["", f"- run status: **{hit.status}** in {hit.seconds:.0f} s (uninterrupted: {ref.status} in {ref.seconds:.0f} s)",
              f"- faults injected: {len(hit.faults)}, survived: {len(hit.faults) if survived else 0}",
              f"- supervisor restarts: {restarts}; broker restarts: {stack.redis.restarts}; "
              f"ledger database restarts: {db_restarts}; resumes (`submit`): {hit.resumes}",
              "- times the run failed and was resumed: " + ("; ".join(f"at {t:.0f} s, `{e[:160]}`" for t, e in hit.failures)
                                                             or "none (the worker fault's resume is not a failure)"),
              f"- steps expected: {once['expected']}, **steps lost: {once['lost']}**, "
              f"**steps applied twice: {once['applied_twice']}** (trainer journal), ledger duplicates: {once['ledger_duplicates']}",
              f"- trainer global step after the faults: {state.global_step} (= steps applied: {once['applied']})",
              f"- versus the uninterrupted run: step order {'identical' if not diff['steps'] else diff['steps']}, "
              f"weight versions {'identical' if not diff['versions'] else diff['versions']}, "
              f"published weights {'bit-identical' if not diff['weights'] else 'differ at ' + str(diff['weights'])}, "
              f"losses {'identical' if not diff['losses'] else 'differ: ' + str(diff['losses'])}",
              f"- flipped byte in published weights: LoadWeights answered **{corrupt['code']}**, the policy kept "
              f"version {corrupt['kept']} (before: {corrupt['before']})", ""]
    return lines, {"lost": once["lost"], "twice": once["applied_twice"], "survived": survived, "faults": len(hit.faults),
                   "postgres": stack.postgres is not None}


def corrupted_load(stack, hit) -> dict:
    version, uri, sha = hit.ledger.weight_versions(hit.run_id)[-1]
    target = sorted(Path(uri).glob("*.safetensors"))[0]
    original = target.read_bytes()
    flipped = bytearray(original)
    flipped[len(flipped) // 2] ^= 0xFF
    with ReplicaClient(stack.specs["policy"].grpc_address, policy_pb2_grpc.PolicyServiceStub) as policy:
        before = policy.call("GetInfo", policy_pb2.GetInfoRequest()).weight_version
        target.write_bytes(bytes(flipped))
        try:
            code = faults.grpc_code(lambda: policy.call("LoadWeights", policy_pb2.LoadWeightsRequest(
                weights={"version": version + 100, "uri": uri, "sha256": sha})))
        finally:
            target.write_bytes(original)
        kept = policy.call("GetInfo", policy_pb2.GetInfoRequest()).weight_version
    return {"code": code.name, "before": before, "kept": kept}


def probe_section(home: Path, model: Path) -> tuple[list[str], dict]:
    sup, specs = probes.start_services(home / "bounded", model)
    try:
        fuzz = [probes.fuzz_service(n, specs[n].grpc_address, seed=i, pid=sup.pid(n)) for i, n in enumerate(specs)]
        crashes = sum(r.health_after != "SERVING" or sup.pid(r.service) != r.pid_before for r in fuzz)
        load = probes.load_reward(specs["reward"].grpc_address, sup.pid("reward"), requests=400, concurrency=48)
        bursts = {
            "policy": probes.burst(specs["policy"].grpc_address, "/cascade.v1.PolicyService/Generate",
                                   policy_pb2.GenerateRequest(prompts=[policy_pb2.Prompt(token_ids=np.array([5, 6], "<i4").tobytes())],
                                                              n=16, sampling=policy_pb2.SamplingParams(max_tokens=24, temperature=1.0)),
                                   policy_pb2.GenerateResponse, 8),
            "teacher": probes.burst(specs["teacher"].grpc_address, "/cascade.v1.TeacherService/ScoreTokens",
                                    teacher_pb2.ScoreTokensRequest(domain="mcqa", prompt_ids=codec.encode([[5] * 40], "int32"),
                                                                   completion_ids=codec.encode([[6] * 60] * 16, "int32"),
                                                                   prompt_index=[0] * 16),
                                    teacher_pb2.ScoreTokensResponse, 8),
        }
    finally:
        sup.stop(grace=5)
    lines = ["## Malformed and oversized gRPC messages", "",
             f"Bounds: max_message_mb={probes.MESSAGE_MB}; random bytes, mutated valid requests, an empty body and a "
             "body above the limit to every method of every service.", "",
             "| service | bodies sent | status codes | unmapped errors | health after | process |", "|---|---|---|---|---|---|"]
    for r in fuzz:
        codes = ", ".join(f"{k} {v}" for k, v in sorted(r.codes.items()))
        same = "same pid" if sup.pid(r.service) == r.pid_before else "RESTARTED"
        lines.append(f"| {r.service} | {r.sent} | {codes} | {len(r.unexpected)} | {r.health_after} | {same} |")
    lines += ["", f"- bad gRPC bodies tried: {sum(r.sent for r in fuzz)}, **crashes: {crashes}**, "
              f"unmapped (INTERNAL/UNKNOWN) answers: {sum(len(r.unexpected) for r in fuzz)}", "",
              "## Load", "",
              f"Reward service: max_pending_items=8, {load.requests} Score calls of 4 items, {load.concurrency} at a time, "
              "no client retries.", "",
              "| requests | answered OK | RESOURCE_EXHAUSTED | other | p50 (ms) | p95 (ms) | p99 (ms) | RSS before / peak / after (MiB) |",
              "|---|---|---|---|---|---|---|---|",
              f"| {load.requests} | {load.codes['OK']} | {load.codes['RESOURCE_EXHAUSTED']} | "
              f"{sum(v for k, v in load.codes.items() if k not in ('OK', 'RESOURCE_EXHAUSTED'))} | "
              f"{load.percentile(50) * 1e3:.1f} | {load.percentile(95) * 1e3:.1f} | {load.percentile(99) * 1e3:.1f} | "
              f"{load.rss_before_mb:.0f} / {load.rss_peak_mb:.0f} / {load.rss_after_mb:.0f} |", ""]
    for name, codes in bursts.items():
        lines.append(f"- {name} (max_concurrent_rpcs=2), a burst of 8 calls: {dict(codes)}")
    lines.append("")
    return lines, {"bad_grpc": sum(r.sent for r in fuzz), "crashes": crashes, "load": load}


def property_section() -> tuple[list[str], dict]:
    """Run the hypothesis properties of tests/reliability/test_properties.py and count the examples."""
    import pytest

    class Count:
        def __init__(self):
            self.outcomes = Counter()

        def pytest_runtest_logreport(self, report):
            if report.when == "call":
                self.outcomes[report.outcome] += 1

    counter = Count()
    start = time.monotonic()
    code = pytest.main(["-q", "-p", "no:cacheprovider", "--hypothesis-show-statistics",
                        str(Path(__file__).resolve().parents[1] / "tests/reliability/test_properties.py")], plugins=[counter])
    tried = 150 * 5 + 120 + 150  # max_examples of the properties (see the test file)
    lines = ["## Property-based bad input (hypothesis)", "",
             f"- ragged codec, task records, cascade configs: {sum(counter.outcomes.values())} properties, "
             f"up to {tried} generated inputs, {counter.outcomes['passed']} passed, {counter.outcomes['failed']} failed "
             f"({time.monotonic() - start:.0f} s); every bad input raised the module's own error naming the field", ""]
    return lines, {"properties_failed": counter.outcomes["failed"] + int(code not in (0,)), "tried": tried}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/reliability.md"))
    args = parser.parse_args()
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cascade-reliability-") as tmp:
        home = Path(tmp)
        model = init_model(home / "model", preset="tiny", seed=0)
        props, p = property_section()
        probe, q = probe_section(home, model)
        fault, f = fault_section(home, model)
    ok = f["survived"] and f["lost"] == 0 and f["twice"] == 0 and q["crashes"] == 0 and p["properties_failed"] == 0
    head = ["# Reliability report", "",
            f"Generated by `python -m bench.reliability` on {platform.node()} ({platform.machine()}, "
            f"{platform.python_version()}), {time.strftime('%Y-%m-%d %H:%M')}, in {time.monotonic() - start:.0f} s.", "",
            "| promise (DESIGN.md section 6) | result |", "|---|---|",
            f"| faults injected / survived | {f['faults']} / {f['faults'] if f['survived'] else 0} |",
            f"| steps lost (must be 0) | {f['lost']} |",
            f"| steps applied twice (must be 0) | {f['twice']} |",
            f"| bad inputs tried (gRPC bodies + generated records/configs) / crashes (must be 0) | "
            f"{q['bad_grpc']} + up to {p['tried']} / {q['crashes']} |",
            f"| load held: reward p50 / p95 / p99 latency | {q['load'].percentile(50) * 1e3:.0f} / "
            f"{q['load'].percentile(95) * 1e3:.0f} / {q['load'].percentile(99) * 1e3:.0f} ms, "
            f"{q['load'].codes['RESOURCE_EXHAUSTED']} of {q['load'].requests} refused with back-pressure |",
            f"| verdict | {'all promises held' if ok else 'A PROMISE WAS BROKEN: see below'} |", ""]
    pg = ("- PostgreSQL ledger outage: a private cluster (initdb into its own folder, as the `postgres` user under root, "
          "own loopback port; the machine's shared 5432 is never touched) holds the ledger of both runs; during the "
          "faulted run its postmaster is SIGKILLed and started again on the same files (crash recovery). Tasks that "
          "meet the refused or dropped connection retry with back-off (`tasks._guard`), SQLAlchemy's pre-ping "
          "replaces the dead pooled connections." if f["postgres"] else
          f"- PostgreSQL ledger outage: not injected on this machine ({private_servers.PG_MISSING}).")
    notes = ["## What is and is not compared", "",
             "- On CPU with fixed seeds, generation, scoring and training are deterministic, so the faulted run is "
             "compared with the uninterrupted one step by step: the published weights' sha256 and the losses. "
             "Weight version numbers match unless a kill lands between PublishWeights and its ledger record "
             "(the trainer then publishes the same weights again under the next number).",
             "- Not bit-reproducible and not compared: wall-clock timings, retry counts and the order of log lines.",
             pg, ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    kept = args.out.read_text().partition(KEPT)[1:] if args.out.exists() else ("", "")
    args.out.write_text("\n".join(head + fault + probe + props + notes) + "".join(kept))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
