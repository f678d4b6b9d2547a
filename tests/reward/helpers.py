"""Shared helpers of the reward tests: build task records, make contexts."""

from __future__ import annotations

from services.common.tasks import TaskRecord
from services.reward.verifiers.base import Context, VerifyOptions


def task(domain: str, **fields) -> TaskRecord:
    """A validated TaskRecord of `domain` with a one-line prompt and `fields`."""
    return TaskRecord.parse({"id": f"{domain}-t", "domain": domain, "messages": [{"role": "user", "content": "q"}], **fields})


def ctx(**options) -> Context:
    return Context(options=VerifyOptions(**options))
