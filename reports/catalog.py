"""The managers' reports by name: what the page tabs, the JSON API and the CSV export offer."""

from __future__ import annotations

from collections.abc import Callable

from reports import accounting, capacity, ettr, failures, goodput, lemons, reliability
from reports.base import Report
from reports.params import ReportQuery

REPORTS: dict[str, tuple[str, Callable[[ReportQuery], Report]]] = {
    "utilization": ("Utilization", capacity.utilization),
    "training_share": ("Training vs inference", capacity.training_share),
    "availability": ("Availability", capacity.availability),
    "reliability": ("Reliability", reliability.reliability),
    "goodput": ("Goodput", goodput.goodput),
    "remediation": ("Remediation", reliability.remediation),
    "accounting": ("Accounting", accounting.usage),
    "lemons": ("Lemon nodes", lemons.lemons),
    "failures": ("MTBF and MTTR", failures.failures),
    "ettr": ("ETTR", ettr.ettr),
}


def compute(name: str, query: ReportQuery) -> Report:
    """Compute one report; `name` must be a key of REPORTS."""
    return REPORTS[name][1](query)
