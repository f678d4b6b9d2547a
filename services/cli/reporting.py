"""What `cascade report` and the end of `cascade demo` say: each claim, its verdict (holds / not shown
/ fails), its figures with their 95 % intervals,
and where the HTML report and its PNGs are (as paths and a file:// address a browser opens).

The claims are computed by services.orchestrator.report from the ledger; this module writes the
report and words the summary, nothing else.
"""

from __future__ import annotations

import webbrowser
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ReportSummary:
    html: Path
    pngs: list[Path]
    claims: list
    """services.orchestrator.report.Claim: claim, verdict, evidence with its figures and intervals."""

    @property
    def url(self) -> str:
        return self.html.resolve().as_uri()

    def lines(self) -> list[str]:
        """`<verdict>: <claim> — <figures with intervals>` per claim, then the report's paths."""
        out = [f"{c.verdict}: {c.claim} — {c.evidence}" for c in self.claims]
        if not self.claims:
            out.append("no claim could be computed: no stage was evaluated")
        out.append(f"report: {self.html} (open {self.url})")
        out += [f"  plot: {p}" for p in self.pngs]
        return out


def report_dir(home: Path, run_id: int) -> Path:
    """Where a run's report is written: <home>/runs/<run>/report."""
    return Path(home).resolve() / "runs" / str(run_id) / "report"


def write_summary(ledger, run_id: int, home: Path) -> ReportSummary:
    """Write the run's report (HTML + PNGs) and return what it says."""
    from services.orchestrator.report import run_claims, write_report

    html = write_report(ledger, run_id, report_dir(home, run_id))
    return ReportSummary(html, sorted(html.parent.glob("*.png")), run_claims(ledger, run_id))


def open_in_browser(url: str) -> bool:
    """True when a browser took the address; False where there is none (a server, a container)."""
    try:
        return webbrowser.open(url)
    except webbrowser.Error:
        return False
