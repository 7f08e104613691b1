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


# The filters each tab honours: the groupings it splits by ("" for none, listed first
# when a tab can be shown unsplit) and whether it has a time axis. The page shows only
# these, so no control sits on a tab where it changes nothing.
CONTROLS: dict[str, tuple[tuple[str, ...], bool]] = {
    "utilization": (("", "partition", "pool", "account", "user"), True),
    "training_share": ((), True),
    "availability": (("", "partition", "pool"), True),
    "reliability": ((), True),
    "goodput": (("account", "user"), False),
    "accounting": (("account", "user", "partition", "qos"), False),
}


def controls(name: str) -> tuple[tuple[str, ...], bool]:
    """(groupings, time bucket?) that change what the tab NAME shows."""
    return CONTROLS.get(name, ((), False))


def compute(name: str, query: ReportQuery) -> Report:
    """Compute one report; `name` must be a key of REPORTS."""
    return REPORTS[name][1](query)
