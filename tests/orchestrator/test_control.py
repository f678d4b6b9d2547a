"""RunControl over a real SQLite ledger: submit, cancel and resume, as the CLI and the API use them."""

from __future__ import annotations

import pytest

from services.common.errors import FailedPrecondition
from services.orchestrator.cascade_config import CascadeConfig
from services.orchestrator.control import RunControl, SubmitFailed, run_control
from services.orchestrator.ledger import Ledger, ledger_at

CASCADE = CascadeConfig.model_validate({"name": "c", "model": "/m", "stages": [
    {"name": "rl", "type": "grpo", "domains": ["mcqa"], "batch_size": 2, "rollouts_per_prompt": 2, "steps": 1,
     "optimizer": {"lr": 1e-6}}]})


@pytest.fixture
def ledger(tmp_path):
    led = Ledger(f"sqlite:///{tmp_path}/ledger.db")
    yield led
    led.close()


def test_submit_records_the_run_before_handing_its_id_over(ledger):
    handed: list[tuple[int, str]] = []
    control = RunControl(ledger, lambda run_id: handed.append((run_id, ledger.run(run_id).status)))
    run_id = control.submit(CASCADE)
    assert handed == [(run_id, "pending")] and ledger.run(run_id).config == CASCADE.model_dump(mode="json")


def test_a_failed_hand_over_marks_the_run_failed_with_the_reason(ledger):
    def refuse(_run_id: int) -> None:
        raise ConnectionRefusedError("broker refused")

    with pytest.raises(SubmitFailed, match="run 1: could not hand the run to the orchestrator: ConnectionRefusedError"):
        RunControl(ledger, refuse).submit(CASCADE)
    assert ledger.run(1).status == "failed" and "broker refused" in ledger.run(1).error


def test_cancel_only_an_unfinished_run(ledger):
    control = RunControl(ledger, lambda _id: None)
    run_id = control.submit(CASCADE)
    control.cancel(run_id)
    assert ledger.cancel_requested(run_id)
    ledger.set_run_status(run_id, "cancelled")
    with pytest.raises(FailedPrecondition, match=f"run {run_id} already cancelled"):
        control.cancel(run_id)


def test_resume_clears_a_failure_and_hands_the_run_over_again_but_not_a_succeeded_one(ledger):
    handed: list[int] = []
    control = RunControl(ledger, handed.append)
    run_id = control.submit(CASCADE)
    ledger.set_run_status(run_id, "failed", error="worker lost")
    control.resume(run_id)
    assert handed == [run_id, run_id] and ledger.run(run_id).status == "running" and not ledger.run(run_id).error
    ledger.set_run_status(run_id, "succeeded")
    with pytest.raises(FailedPrecondition, match="already succeeded; nothing to resume"):
        control.resume(run_id)


def test_the_production_control_uses_the_process_ledger_of_the_settings(tmp_path):
    from services.orchestrator.config import OrchestratorSettings

    settings = OrchestratorSettings(home=tmp_path)
    assert run_control(settings).ledger is ledger_at(settings.ledger())
