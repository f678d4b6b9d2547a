"""Prometheus metrics of the reward service (DESIGN.md section 7), created once per process."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from services.common.metrics import LATENCY_BUCKETS

VERDICTS = Counter(
    "cascade_reward_verdicts_total", "Scored items, by domain and verdict.", ["domain", "verdict"]
)
SCORE_SECONDS = Histogram(
    "cascade_reward_score_duration_seconds", "Wall time of scoring one item, by domain.", ["domain"],
    buckets=LATENCY_BUCKETS,
)
SANDBOX_RUNS = Counter(
    "cascade_reward_sandbox_executions_total", "Sandboxed program runs, by outcome.", ["outcome"]
)
QUEUE_DEPTH = Gauge("cascade_reward_queue_depth", "Items admitted and not yet scored (queued + running).")
