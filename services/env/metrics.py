"""Prometheus metrics of the env service (DESIGN.md section 7), created once per process."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from services.common.metrics import LATENCY_BUCKETS

EPISODES_OPENED = Counter("cascade_env_episodes_opened_total", "Episodes opened, by environment.", ["environment"])
EPISODES_CLOSED = Counter(
    "cascade_env_episodes_closed_total", "Episodes ended and cleaned up, by environment and verdict.",
    ["environment", "verdict"],
)
TURNS = Counter("cascade_env_turns_total", "Assistant turns stepped, by environment.", ["environment"])
TURN_SECONDS = Histogram(
    "cascade_env_turn_duration_seconds", "Environment wall time of one turn (its tool calls), by environment.",
    ["environment"], buckets=LATENCY_BUCKETS,
)
TOOL_ERRORS = Counter(
    "cascade_env_tool_errors_total", "Tool calls answered with an error, by environment and tool.",
    ["environment", "tool"],
)
OPEN_EPISODES = Gauge("cascade_env_open_episodes", "Episodes open right now.")
