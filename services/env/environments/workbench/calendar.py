"""Workbench toolkit: the calendar (read, search, create, delete, update events). Event ids are 8 digits."""

from __future__ import annotations

from services.env.environments.base import ToolError
from services.env.environments.workbench.registry import find, need, next_id, paginate, tool, when
from services.env.environments.workbench.tables import Tables

EVENT_FIELDS = ("event_id", "event_name", "participant_email", "event_start", "duration")
ID = ("string", "The event's 8-digit id")


def _check_id(event_id: str) -> None:
    if not (len(event_id) == 8 and event_id.isdigit()):
        raise ToolError(f"event_id must be 8 digits, got {event_id!r}")


def _check_value(field: str, value: str) -> None:
    if field == "event_start":
        when(value, "event_start")
    elif field == "duration":
        try:
            minutes = int(value)
        except ValueError:
            raise ToolError(f"duration must be a whole number of minutes, got {value!r}") from None
        if minutes <= 0:
            raise ToolError(f"duration must be positive, got {minutes}")


@tool("calendar_get_event_information_by_id", "Returns one field of a calendar event, by the event's id.",
      {"event_id": ID, "field": ("string", f"The field to return, one of: {', '.join(EVENT_FIELDS)}")},
      ("event_id", "field"))
def get_event(t: Tables, event_id=None, field=None) -> dict:
    need(event_id=event_id, field=field)
    _check_id(event_id)
    if field not in EVENT_FIELDS:
        raise ToolError(f"field {field!r} does not exist; fields: {', '.join(EVENT_FIELDS)}")
    return {field: find(t.events, "event_id", event_id, "event")[field]}


@tool("calendar_search_events", "Searches events whose name or participant email contains the query, latest first.",
      {"query": ("string", "Text to look for in event names and participant emails"),
       "time_min": ("string", "Earliest start, inclusive, YYYY-MM-DD HH:MM:SS"),
       "time_max": ("string", "Latest start, inclusive, YYYY-MM-DD HH:MM:SS"),
       "page": ("integer", "Page of results (from 1)"), "page_size": ("integer", "Events per page (default 5)")})
def search_events(t: Tables, query: str = "", time_min=None, time_max=None, page: int = 1, page_size: int = 5):
    low = when(time_min, "time_min") if time_min else None
    high = when(time_max, "time_max") if time_max else None
    q = query.lower()
    hits = [r for r in t.events if q in (r["event_name"] or "").lower() or q in (r["participant_email"] or "").lower()]
    if low:
        hits = [r for r in hits if when(r["event_start"], "event_start") >= low]
    if high:
        hits = [r for r in hits if when(r["event_start"], "event_start") <= high]
    if not hits:
        return "No events found."
    hits.sort(key=lambda r: when(r["event_start"], "event_start"), reverse=True)
    return paginate(hits, page, page_size, "events")


@tool("calendar_create_event", "Creates a calendar event and returns its id.",
      {"event_name": ("string", "Name of the event"), "participant_email": ("string", "Email of the participant"),
       "event_start": ("string", "Start time, YYYY-MM-DD HH:MM:SS"), "duration": ("string", "Length in minutes")},
      ("event_name", "participant_email", "event_start", "duration"), writes=True)
def create_event(t: Tables, event_name=None, participant_email=None, event_start=None, duration=None) -> str:
    need(event_name=event_name, participant_email=participant_email, event_start=event_start, duration=duration)
    _check_value("event_start", event_start)
    _check_value("duration", duration)
    event_id = next_id(t.events, "event_id")
    t.events.append({"event_id": event_id, "event_name": event_name, "participant_email": participant_email.lower(),
                     "event_start": event_start, "duration": duration})
    return event_id


@tool("calendar_delete_event", "Deletes a calendar event, by its id.", {"event_id": ID}, ("event_id",), writes=True)
def delete_event(t: Tables, event_id=None) -> str:
    need(event_id=event_id)
    _check_id(event_id)
    t.events.remove(find(t.events, "event_id", event_id, "event"))
    return "Event deleted successfully."


@tool("calendar_update_event", "Changes one field of a calendar event.",
      {"event_id": ID, "field": ("string", f"The field to change, one of: {', '.join(EVENT_FIELDS[1:])}"),
       "new_value": ("string", "The new value")}, ("event_id", "field", "new_value"), writes=True)
def update_event(t: Tables, event_id=None, field=None, new_value=None) -> str:
    need(event_id=event_id, field=field, new_value=new_value)
    _check_id(event_id)
    if field not in EVENT_FIELDS[1:]:
        raise ToolError(f"field {field!r} cannot be changed; fields: {', '.join(EVENT_FIELDS[1:])}")
    _check_value(field, new_value)
    row = find(t.events, "event_id", event_id, "event")
    row[field] = new_value.lower() if field == "participant_email" else new_value
    return "Event updated successfully."
