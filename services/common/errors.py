"""Typed errors shared by the services.

A core object raises these; the thin gRPC layer maps them to status codes. Every message names
the offending field and value, so a user can fix the request without reading our code.
"""

from __future__ import annotations


class CascadeError(Exception):
    """Base class of every error Cascade raises on purpose."""


class InvalidArgument(CascadeError):
    """A request or record field is wrong. Maps to gRPC INVALID_ARGUMENT."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class FailedPrecondition(CascadeError):
    """The service is not in a state to do this (no model loaded, unknown version)."""


class NotFound(CascadeError):
    """A named thing (domain, checkpoint tag, weight version) does not exist."""


class ResourceExhausted(CascadeError):
    """The service's queue is full; retry later (back-pressure)."""


class Unavailable(CascadeError):
    """The service is starting (loading its model) or stopping; retry shortly. Maps to UNAVAILABLE."""


class ChecksumMismatch(CascadeError):
    """Weights whose sha256 differs from the one announced; they are never loaded."""
