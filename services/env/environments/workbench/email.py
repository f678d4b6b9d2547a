"""Workbench toolkit: the mailbox (read, search, send, delete, forward, reply) and the company directory."""

from __future__ import annotations

from services.env.environments.base import ToolError
from services.env.environments.workbench.registry import (
    find,
    need,
    next_id,
    paginate,
    tool,
    valid_email,
    when,
)
from services.env.environments.workbench.tables import NOW, Tables

EMAIL_FIELDS = ("email_id", "inbox/outbox", "sender/recipient", "subject", "sent_datetime", "body")


@tool("company_directory_find_email_address", "Finds every company email address containing a name (case-insensitive).",
      {"name": ("string", "A name or part of one")})
def find_email_address(t: Tables, name: str = "") -> list[str]:
    need(name=name)
    return [a for a in t.directory if name.lower() in a.lower()]


@tool("email_get_email_information_by_id", "Returns one field of an email, by the email's id.",
      {"email_id": ("string", "Id of the email"),
       "field": ("string", f"The field to return, one of: {', '.join(EMAIL_FIELDS)}")}, ("email_id", "field"))
def get_email(t: Tables, email_id: str | None = None, field: str | None = None) -> dict:
    need(email_id=email_id, field=field)
    row = find(t.emails, "email_id", email_id, "email")
    if field not in row:
        raise ToolError(f"field {field!r} does not exist; fields: {', '.join(row)}")
    return {field: row[field]}


@tool("email_search_emails", "Searches emails whose subject, body or sender/recipient hold every word of the query, "
      "newest first.",
      {"query": ("string", "Words to look for"), "date_min": ("string", "Earliest sent date, inclusive, YYYY-MM-DD"),
       "date_max": ("string", "Latest sent date, inclusive, YYYY-MM-DD"), "page": ("integer", "Page of results (from 1)"),
       "page_size": ("integer", "Emails per page (default 5)")})
def search_emails(t: Tables, query: str = "", date_min=None, date_max=None, page: int = 1, page_size: int = 5):
    words = query.lower().split()
    hits = [r for r in t.emails
            if all(w in f"{r['subject']} {r['body']} {r['sender/recipient']}".lower() for w in words)]
    hits.sort(key=lambda r: when(r["sent_datetime"], "sent_datetime"), reverse=True)
    if date_min:
        low = when(date_min, "date_min").date()
        hits = [r for r in hits if when(r["sent_datetime"], "sent_datetime").date() >= low]
    if date_max:
        high = when(date_max, "date_max").date()
        hits = [r for r in hits if when(r["sent_datetime"], "sent_datetime").date() <= high]
    if not hits:
        return "No emails found."
    return paginate(hits, page, page_size, "emails")


@tool("email_send_email", "Sends an email.",
      {"recipient": ("string", "Email address of the recipient"), "subject": ("string", "Subject line"),
       "body": ("string", "Body text")}, ("recipient", "subject", "body"), writes=True)
def send_email(t: Tables, recipient=None, subject=None, body=None) -> str:
    need(recipient=recipient, subject=subject, body=body)
    if not valid_email(recipient):
        raise ToolError(f"recipient {recipient!r} is not an email address")
    t.emails.append({"email_id": next_id(t.emails, "email_id", 0), "inbox/outbox": "outbox",
                     "sender/recipient": recipient.lower(), "subject": subject, "sent_datetime": NOW, "body": body})
    return "Email sent successfully."


@tool("email_delete_email", "Deletes an email, by its id.", {"email_id": ("string", "Id of the email to delete")},
      ("email_id",), writes=True)
def delete_email(t: Tables, email_id=None) -> str:
    need(email_id=email_id)
    t.emails.remove(find(t.emails, "email_id", email_id, "email"))
    return "Email deleted successfully."


@tool("email_forward_email", "Forwards an email to a recipient.",
      {"email_id": ("string", "Id of the email to forward"), "recipient": ("string", "Email address of the recipient")},
      ("email_id", "recipient"), writes=True)
def forward_email(t: Tables, email_id=None, recipient=None) -> str:
    need(email_id=email_id, recipient=recipient)
    if not valid_email(recipient):
        raise ToolError(f"recipient {recipient!r} is not an email address")
    row = find(t.emails, "email_id", email_id, "email")
    send_email(t, recipient, f"FW: {row['subject']}", row["body"])
    return "Email forwarded successfully."


@tool("email_reply_email", "Replies to an email, by its id.",
      {"email_id": ("string", "Id of the email to reply to"), "body": ("string", "Body text of the reply")},
      ("email_id", "body"), writes=True)
def reply_email(t: Tables, email_id=None, body=None) -> str:
    need(email_id=email_id, body=body)
    row = find(t.emails, "email_id", email_id, "email")
    send_email(t, row["sender/recipient"], f"RE: {row['subject']}", body)
    return "Email replied successfully."
