"""Workbench toolkit: website analytics (visits by day, engagement, traffic sources, session length, plots).

Only the plots table changes (create_plot); the visits are read-only. Day counts come back as
{date: number}, days in ascending order.
"""

from __future__ import annotations

from services.env.environments.base import ToolError
from services.env.environments.workbench.registry import need, tool
from services.env.environments.workbench.tables import Tables

PLOT_VALUES = ("total_visits", "session_duration_seconds", "user_engaged", "visits_direct", "visits_referral",
               "visits_search_engine", "visits_social_media")
PLOT_TYPES = ("bar", "line", "scatter", "histogram")
RANGE = {"time_min": ("string", "First day, inclusive, YYYY-MM-DD"), "time_max": ("string", "Last day, inclusive, YYYY-MM-DD")}


def _in_range(t: Tables, time_min, time_max) -> list[dict]:
    """Visits with time_min <= date_of_visit <= time_max (compared as YYYY-MM-DD text, as WorkBench does)."""
    return [r for r in t.visits if (not time_min or r["date_of_visit"] >= time_min)
            and (not time_max or r["date_of_visit"] <= time_max)]


def _by_day(rows: list[dict], value) -> dict:
    out: dict[str, float] = {}
    for r in sorted(rows, key=lambda r: r["date_of_visit"]):
        out[r["date_of_visit"]] = out.get(r["date_of_visit"], 0) + value(r)
    return out


@tool("analytics_get_visitor_information_by_id", "Returns the visits of one visitor.",
      {"visitor_id": ("string", "Id of the visitor")}, ("visitor_id",))
def get_visitor(t: Tables, visitor_id=None) -> list[dict]:
    need(visitor_id=visitor_id)
    rows = [{**r, "user_engaged": r["user_engaged"] == "True"} for r in t.visits if r["visitor_id"] == visitor_id]
    if not rows:
        raise ToolError(f"visitor {visitor_id!r} not found")
    return rows


@tool("analytics_create_plot", "Makes a plot of one analytics value over a date range and returns its file path.",
      {**RANGE, "value_to_plot": ("string", f"One of: {', '.join(PLOT_VALUES)}"),
       "plot_type": ("string", f"One of: {', '.join(PLOT_TYPES)}")},
      ("time_min", "time_max", "value_to_plot", "plot_type"), writes=True)
def create_plot(t: Tables, time_min=None, time_max=None, value_to_plot=None, plot_type=None) -> str:
    need(time_min=time_min, time_max=time_max)
    if value_to_plot not in PLOT_VALUES:
        raise ToolError(f"value_to_plot must be one of {', '.join(PLOT_VALUES)}, got {value_to_plot!r}")
    if plot_type not in PLOT_TYPES:
        raise ToolError(f"plot_type must be one of {', '.join(PLOT_TYPES)}, got {plot_type!r}")
    path = f"plots/{time_min}_{time_max}_{value_to_plot}_{plot_type}.png"
    t.plots.append({"file_path": path})
    return path


@tool("analytics_total_visits_count", "Counts visits per day in a date range.", RANGE)
def total_visits(t: Tables, time_min=None, time_max=None) -> dict:
    return _by_day(_in_range(t, time_min, time_max), lambda r: 1)


@tool("analytics_engaged_users_count", "Counts engaged visitors per day in a date range.", RANGE)
def engaged_users(t: Tables, time_min=None, time_max=None) -> dict:
    return _by_day(_in_range(t, time_min, time_max), lambda r: int(r["user_engaged"] == "True"))


@tool("analytics_traffic_source_count", "Counts visits per day from one traffic source (all visits when none is named).",
      {**RANGE, "traffic_source": ("string", "One of: direct, referral, search engine, social media")})
def traffic_source(t: Tables, time_min=None, time_max=None, traffic_source=None) -> dict:
    return _by_day(_in_range(t, time_min, time_max),
                   lambda r: 1 if not traffic_source else int(r["traffic_source"] == traffic_source))


@tool("analytics_get_average_session_duration", "Average session length in seconds per day in a date range.", RANGE)
def average_session(t: Tables, time_min=None, time_max=None) -> dict:
    rows = _in_range(t, time_min, time_max)
    totals, counts = _by_day(rows, lambda r: float(r["session_duration_seconds"])), _by_day(rows, lambda r: 1)
    return {day: totals[day] / counts[day] for day in totals}
