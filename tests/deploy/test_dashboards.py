"""The Grafana dashboards and their provisioning: shape, and only metrics the services really export."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.deploy.promql import (
    DASHBOARDS,
    PROMETHEUS_BUILTINS,
    ROOT,
    dashboard_queries,
    exported_series,
    grafana_to_promql,
    metric_names,
)

PROVISIONING = ROOT / "deploy" / "grafana" / "provisioning"


@pytest.mark.parametrize("expr, names", [
    ('sum by (method, code) (rate(cascade_policy_rpc_duration_seconds_count[$__rate_interval]))',
     {"cascade_policy_rpc_duration_seconds_count"}),
    ('histogram_quantile(0.95, sum by (le, teacher) (rate(x_bucket{method="ScoreTokens"}[5m])))', {"x_bucket"}),
    ('count by (teacher) (up{job="teacher"} == 1)', {"up"}),
    ("a_total / on (run) group_left b", {"a_total", "b"}),
    ('max by (run, domain) (cascade_orchestrator_domain_reward) or vector(0)', {"cascade_orchestrator_domain_reward"}),
])
def test_metric_names_of_an_expression(expr, names):
    assert metric_names(expr) == names


def test_exported_series_expand_counters_histograms_and_the_rpc_templates():
    series = exported_series()
    for name in ("cascade_policy_rpc_duration_seconds_bucket", "cascade_teacher_rpc_errors_total",
                 "cascade_trainer_rpc_in_flight", "cascade_reward_verdicts_total",
                 "cascade_orchestrator_queue_depth", "cascade_orchestrator_tasks_retried_total",
                 "cascade_orchestrator_task_duration_seconds_count"):
        assert name in series, name
    assert "cascade_policy_rpc_duration_seconds" not in series, "a histogram is only its _bucket/_sum/_count"
    assert "cascade_{service}_rpc_in_flight" not in series


def test_the_four_dashboards_exist_with_unique_uids_and_the_provisioned_datasource():
    boards = {p.stem: json.loads(p.read_text()) for p in DASHBOARDS.glob("*.json")}
    assert set(boards) == {"overview", "services", "teachers", "queues"}
    assert len({b["uid"] for b in boards.values()}) == 4
    source = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yaml").read_text())["datasources"][0]
    for name, board in boards.items():
        for panel in board["panels"]:
            if panel["type"] == "row":
                continue
            assert panel["datasource"]["uid"] == source["uid"], f"{name}: {panel['title']}"
            assert panel["targets"], f"{name}: {panel['title']} has no query"
    provider = yaml.safe_load((PROVISIONING / "dashboards" / "cascade.yaml").read_text())["providers"][0]
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    mounts = compose["services"]["grafana"]["volumes"]
    assert f"./deploy/grafana/dashboards:{provider['options']['path']}:ro" in mounts


def test_every_dashboard_query_reads_only_exported_metrics():
    series = exported_series()
    queries = dashboard_queries()
    assert len(queries) >= 40
    unknown = []
    for board, title, expr in queries:
        names = metric_names(grafana_to_promql(expr))
        assert names, f"{board}: {title}: no metric in {expr!r}"
        unknown += [f"{board}: {title}: {n}" for n in names if n not in series and n not in PROMETHEUS_BUILTINS]
    assert not unknown, "metrics no service exports:\n" + "\n".join(unknown)


def test_the_checker_flags_a_metric_nobody_exports():
    series = exported_series()
    names = metric_names("sum(rate(cascade_policy_tokens_generated_totl[1m])) + cascade_policy_weight_version")
    assert [n for n in names if n not in series] == ["cascade_policy_tokens_generated_totl"]
