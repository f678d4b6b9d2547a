"""Run inside a worker host: record a cascade in the ledger, submit it, and follow it to the end,
rewriting `STATUS` (JSON: status, steps with their phases, attempts) every 0.2 s so the test can fire
faults by the ledger's progress. Prints the final status as one JSON line.

    python -m tests.hosts.drive_run CASCADE_JSON STATUS_JSON TIMEOUT_S
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from services.orchestrator import tasks
from services.orchestrator.config import OrchestratorSettings
from services.orchestrator.ledger import Ledger


def main() -> None:
    config, status_file, timeout = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]), float(sys.argv[3])
    settings = OrchestratorSettings()
    ledger = Ledger(settings.ledger())
    run_id = ledger.create_run(config["name"], config)
    tasks.submit(run_id, settings)
    start = time.monotonic()
    while True:
        run = ledger.run(run_id)
        steps = [{"stage": s.stage_index, "step": s.step_index, "phase": s.phase, "attempts": s.attempts,
                  "step_id": s.step_id, "timings": s.timings}
                 for s in ledger.steps(run_id)]
        state = {"run_id": run_id, "status": run.status, "error": run.error, "steps": steps,
                 "seconds": time.monotonic() - start}
        tmp = status_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, status_file)
        if run.status in ("succeeded", "failed", "cancelled") or time.monotonic() - start > timeout:
            break
        time.sleep(0.2)
    print(json.dumps(state), flush=True)


if __name__ == "__main__":
    main()
