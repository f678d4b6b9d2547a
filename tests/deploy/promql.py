"""Helpers of the deploy tests: the PromQL of the Grafana dashboards and the metrics the code exports.

`dashboard_queries` lists every (dashboard, panel, expression); `metric_names` finds the metric
names an expression reads; `exported_series` greps services/ for every Prometheus metric the
code defines and returns the series names Prometheus will see (`_total` of counters, `_bucket` /
`_sum` / `_count` of histograms). Pure functions over files; no server is involved.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "deploy" / "grafana" / "dashboards"
PROMETHEUS_BUILTINS = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
            "offset", "inf", "nan"}

_DEFINITION = re.compile(
    r"\b(Counter|Gauge|Histogram|Summary|CounterMetricFamily|GaugeMetricFamily|HistogramMetricFamily)"
    r"\(\s*(f?)\"([a-zA-Z_:{}][a-zA-Z0-9_:{}]*)\"")
_SERVICE_NAME = re.compile(r"\b(?:GrpcServer|rpc_metrics)\(\s*\"([a-z_]+)\"")


def dashboard_queries(folder: Path = DASHBOARDS) -> list[tuple[str, str, str]]:
    """(dashboard file, panel title, PromQL) for every target of every panel, rows included."""
    out = []
    for path in sorted(folder.glob("*.json")):
        board = json.loads(path.read_text())
        panels = list(board.get("panels", []))
        while panels:
            panel = panels.pop(0)
            panels.extend(panel.get("panels", []))
            for target in panel.get("targets", []):
                out.append((path.name, panel.get("title", ""), target["expr"]))
    return out


def grafana_to_promql(expr: str, rate_interval: str = "1m") -> str:
    """Replace Grafana's interval variables so Prometheus can run the expression as is."""
    for var in ("$__rate_interval", "$__interval", "$__range"):
        expr = expr.replace(var, rate_interval)
    return expr


def metric_names(expr: str) -> set[str]:
    """Metric names an expression reads: identifiers left once strings, label matchers, ranges,
    grouping clauses, function calls, numbers and keywords are taken out."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', " ", expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    s = re.sub(r"\b[a-zA-Z_][a-zA-Z0-9_]*\s*\(", " ", s)
    words = re.findall(r"(?<![0-9.])\b[a-zA-Z_:][a-zA-Z0-9_:]*\b", s)
    return {w for w in words if w.lower() not in KEYWORDS}


def exported_series(root: Path = ROOT / "services") -> dict[str, str]:
    """Series name -> the file defining it, for every metric defined under `root` (generated code skipped)."""
    files = [p for p in root.rglob("*.py") if "pb" not in p.relative_to(root).parts]
    sources = {p: p.read_text(encoding="utf-8") for p in files}
    services = {name for text in sources.values() for name in _SERVICE_NAME.findall(text)}
    series: dict[str, str] = {}
    for path, text in sources.items():
        for kind, is_f, name in _DEFINITION.findall(text):
            names = [name.replace("{service}", svc) for svc in services] if is_f and "{service}" in name else [name]
            if "{" in "".join(names):
                continue  # a template we cannot expand: not counted as exported
            for base in names:
                for s in _series_of(kind, base):
                    series[s] = str(path.relative_to(root.parent))
    return series


def _series_of(kind: str, name: str) -> list[str]:
    if kind in ("Counter", "CounterMetricFamily"):
        base = name.removesuffix("_total")
        return [f"{base}_total", f"{base}_created"]
    if kind in ("Histogram", "HistogramMetricFamily"):
        return [f"{name}_bucket", f"{name}_sum", f"{name}_count", f"{name}_created"]
    if kind == "Summary":
        return [name, f"{name}_sum", f"{name}_count", f"{name}_created"]
    return [name]
