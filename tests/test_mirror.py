"""Tests mirror the tree: every module under services/ has tests/<package>/test_<module>.py, or is
listed in NO_TEST_MODULE with the reason it has none (and where it is tested instead).

A new module without its test module fails here; so does an entry left behind after its module
was removed or got a test module (the list only shrinks by being kept true).
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVICES = "generated gRPC stubs (services.common.protogen writes them; tests/common/test_protos.py checks them)"
MAIN = "a short entry point: started as a process by tests/integration and tests/e2e"
SERVER = "a thin servicer: tested over real gRPC in tests/integration/test_{}_grpc.py"

NO_TEST_MODULE: dict[str, str] = {
    "services/api/__main__.py": MAIN + " (tests/api/test_main.py runs its app factory)",
    "services/api/metrics.py": "the /metrics route of tests/api/test_app.py",
    "services/api/schemas.py": "response models: every route's reply in tests/api/test_app.py and test_views.py",
    "services/cli/data.py": "the CLI, end to end in tests/e2e/test_cli_stack.py",
    "services/cli/main.py": "the CLI, end to end in tests/e2e/test_cli_stack.py",
    "services/cli/model.py": "the CLI, end to end in tests/e2e/test_cli_stack.py",
    "services/cli/serve.py": "the CLI, end to end in tests/e2e/test_cli_stack.py",
    "services/common/errors.py": "exception classes only: every test of a refusal checks them",
    "services/common/grpc_client.py": "tests/integration/test_grpc_bootstrap.py (real channels, fail-over, auth)",
    "services/common/grpc_server.py": "tests/integration/test_grpc_bootstrap.py (real server, interceptors, health)",
    "services/common/metrics.py": "tests/integration/test_grpc_bootstrap.py (the RPC metrics it registers)",
    "services/common/modelio.py": "tests/common/test_settings_modelio.py and test_safetensors_views.py",
    "services/common/protogen.py": "tests/common/test_protos.py (the stubs it generates)",
    "services/common/settings.py": "tests/common/test_settings_modelio.py",
    "services/common/toolcalls.py": "tests/reward/test_toolcalls.py (the tool-call parser with its verifier)",
    **{f"services/common/synth/{m}.py": "tests/common/synth/test_domains.py (one table over the domain registry)"
       for m in ("base", "code", "ifeval", "long_context", "math", "mcqa", "rlhf", "structured", "tool")},
    "services/orchestrator/artifacts.py": "the step artefacts of tests/orchestrator/steps and tests/integration/test_cascade_run.py",
    "services/orchestrator/clients.py": "gRPC clients: tests/integration/test_cascade_run.py (steps/ tests use the cores in process)",
    "services/orchestrator/context.py": "tests/integration/test_cascade_run.py (context_for from a run id); steps/ tests build one",
    "services/orchestrator/ledger_tables.py": "table definitions: tests/orchestrator/test_ledger.py",
    "services/orchestrator/report.py": "tests/e2e/test_cli_stack.py (`cascade report`) and tests/orchestrator/test_findings.py",
    "services/orchestrator/rollout.py": "the service calls of the steps: tests/orchestrator/steps",
    "services/orchestrator/sqla_transport.py": "tests/orchestrator/test_celery_app.py (the embedded broker)",
    "services/orchestrator/weights.py": "weight versions: tests/orchestrator/steps (publish, sync, generate_at)",
    "services/policy/__main__.py": MAIN,
    "services/policy/backends/base.py": "the backend protocol: tests/policy/test_core.py",
    "services/policy/backends/hf.py": "tests/policy/test_hf.py (backend tests sit at tests/policy/)",
    "services/policy/backends/attention.py": "tests/policy/test_attention.py (backend tests sit at tests/policy/)",
    "services/policy/backends/vllm.py": "tests/policy/test_vllm.py (backend tests sit at tests/policy/)",
    "services/policy/config.py": "tests/policy/test_core.py (the core built from it)",
    "services/policy/server.py": SERVER.format("policy"),
    "services/reward/__main__.py": MAIN,
    "services/reward/cli.py": "tests/integration/test_reward_grpc.py (the scoring CLI against a served reward)",
    "services/reward/config.py": "tests/reward/test_core.py (the core built from it)",
    "services/reward/metrics.py": "tests/integration/test_reward_grpc.py (verdict counters on /metrics)",
    "services/reward/server.py": SERVER.format("reward"),
    **{f"services/reward/verifiers/{m}.py": f"tests/reward/test_{t}.py (verifier tests sit at tests/reward/)"
       for m, t in (("code", "code"), ("ifeval", "ifeval"), ("ifeval_checks", "ifeval"), ("long_context", "mcqa_long_context"),
                    ("math", "math"), ("mcqa", "mcqa_long_context"), ("rlhf", "rm"), ("structured", "structured"),
                    ("swe", "swe"), ("tool", "tool"))},
    "services/reward/verifiers/base.py": "the verifier protocol: tests/reward/test_core.py",
    "services/common/rm_inputs.py": "tests/reward/test_rm.py (the trainer's and the reward service's ids of one pair compared)",
    "services/common/sandbox/isolation.py": "tests/common/sandbox/test_sandbox.py (the limits every sandboxed run gets)",
    "services/common/sandbox/pylib.py": "tests/env/environments/test_swe.py and tests/reward/test_swe.py (sandboxed pytest runs)",
    **{f"services/common/synth/multiturn/{m}.py": "tests/common/synth/test_multiturn.py (one table over the generators)"
       for m in ("python", "swe", "workbench")},
    "services/common/weightfetch.py": "tests/hosts/test_weights_over_network.py (a fetch across hosts, cut and resumed)",
    "services/common/workbench_task.py": "tests/common/test_nemo_gym.py (the released workbench rows parsed as they are)",
    "services/env/__main__.py": MAIN,
    "services/env/environments/base.py": "the environment protocol: tests/env/test_core.py",
    **{f"services/env/environments/workbench/{m}.py": "tests/env/environments/test_workbench.py (every tool against its tables)"
       for m in ("analytics", "calendar", "crm", "email", "project_management", "registry", "tables", "task")},
    "services/env/metrics.py": "tests/integration/test_env_grpc.py (the cascade_env_* series on /metrics)",
    "services/env/server.py": SERVER.format("env"),
    "services/orchestrator/redis_leases.py": "tests/integration/test_celery_brokers.py (a killed worker's task back on Redis)",
    **{f"services/reward/verifiers/{m}.py": f"tests/reward/test_{m}.py (verifier tests sit at tests/reward/)"
       for m in ("mcqa_grading", "swe_gym", "verifiable_checks")},
    "services/teacher/__main__.py": MAIN,
    "services/teacher/backends.py": "tests/teacher/test_core.py and test_scoring.py",
    "services/teacher/client.py": "tests/teacher/test_cli.py",
    "services/teacher/config.py": "tests/teacher/test_core.py (the core built from it)",
    "services/teacher/server.py": SERVER.format("teacher"),
    "services/trainer/__main__.py": MAIN,
    "services/trainer/config.py": "tests/trainer/test_core.py (the core built from it)",
    "services/trainer/distributed.py": "tests/trainer/test_core.py and tests/integration/test_trainer_grpc.py (2 ranks)",
    "services/trainer/engine.py": "tests/trainer/test_engine_logits.py and test_engine_placement.py",
    "services/trainer/server.py": SERVER.format("trainer"),
}


def mirrored(module: Path) -> Path:
    """services/a/b/c.py -> tests/a/b/test_c.py"""
    rel = module.relative_to(ROOT / "services")
    return ROOT / "tests" / rel.parent / f"test_{rel.name}"


def exempt(module: Path) -> str | None:
    """The reason a module needs no test module of its own, if it is one of the kinds that never do."""
    if module.name == "__init__.py":
        return "a package marker"
    if "pb" in module.relative_to(ROOT).parts:
        return SERVICES
    return None


def test_every_module_has_its_test_module_or_a_reason():
    missing = []
    for module in sorted((ROOT / "services").rglob("*.py")):
        rel = str(module.relative_to(ROOT))
        if exempt(module) or mirrored(module).exists() or rel in NO_TEST_MODULE:
            continue
        missing.append(f"{rel}: add {mirrored(module).relative_to(ROOT)} or list it in NO_TEST_MODULE with the reason")
    assert not missing, "\n".join(missing)


def test_the_list_of_reasons_is_kept_true():
    stale = []
    for rel, reason in NO_TEST_MODULE.items():
        module = ROOT / rel
        if not module.exists():
            stale.append(f"{rel}: no such module (remove its entry)")
        elif mirrored(module).exists():
            stale.append(f"{rel}: has {mirrored(module).relative_to(ROOT)} now (remove its entry)")
        elif not reason.strip():
            stale.append(f"{rel}: give the reason")
    assert not stale, "\n".join(stale)
