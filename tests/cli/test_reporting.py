"""`cascade report RUN [--open]` over a recorded run: each claim with its figures, the report's paths."""

from __future__ import annotations

import pytest

from services.cli import reporting
from services.cli.main import main
from services.orchestrator.config import OrchestratorSettings
from services.orchestrator.ledger import Ledger
from tests.api.conftest import record_run


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    monkeypatch.setenv("CASCADE_ORCH_HOME", str(tmp_path))
    ledger = Ledger(OrchestratorSettings(home=tmp_path).ledger())
    run_id = record_run(ledger, status="succeeded")
    yield tmp_path, run_id
    ledger.close()


@pytest.mark.parametrize("browser", [True, False])
def test_report_names_each_claim_and_the_paths_and_opens_the_html(recorded, monkeypatch, capsys, browser):
    home, run_id = recorded
    opened = []
    monkeypatch.setattr(reporting.webbrowser, "open", lambda url: opened.append(url) or browser)
    main(["report", str(run_id), "--home", str(home), "--open"])
    out = capsys.readouterr().out
    html = home / "runs" / str(run_id) / "report" / "report.html"
    assert html.exists() and opened == [html.as_uri()]
    assert "holds: each RL stage raises its own domains' validation reward over the model it started from " \
           "(by ≥ 0.05, 95 % interval above zero) — if-rl/if: 0.20 → 0.60 (+0.40 [+0.31, +0.50], n=100: holds)" in out
    assert "fails: MOPD brings every domain to ≥ 90% of its best teacher" in out
    assert "mcqa: 0.62 vs teacher 0.65 [0.70] (95%, interval [90%, 100%], n=100: not shown)" in out
    assert f"report: {html} (open {html.as_uri()})" in out
    assert f"plot: {html.parent / 'rewards.png'}" in out and f"plot: {html.parent / 'step_times.png'}" in out
    assert ("no browser to open here" in out) is (not browser)
