"""Structured logs: one JSON object per line with the extra fields kept."""

import json
import logging

from services.common.logs import JsonFormatter


def test_json_formatter_keeps_extra_fields():
    record = logging.LogRecord("cascade.test", logging.INFO, __file__, 1, "step %d done", (3,), None)
    record.step_id = "run-1/s0/3"
    out = json.loads(JsonFormatter().format(record))
    assert out["msg"] == "step 3 done" and out["level"] == "info" and out["step_id"] == "run-1/s0/3"
    assert out["ts"].endswith("Z")
