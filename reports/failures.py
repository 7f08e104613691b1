"""MTBF and MTTR by XID, GPU model and node, and how many faults healed without a human.

- A failure is a critical incident (an XID burst or a failed health check that
  went critical) opened in the range.
- MTBF (mean time between failures) = in-service hours / failures. For an XID
  and a GPU model the hours are GPU-hours (any GPU can raise any XID); for a
  node they are the node's own hours. In service: not down, failed, drained or
  replacing (as in the availability report).
- MTTR (mean time to repair) = the mean, over failures whose remediation run
  succeeded, of the time from the incident's first event to the run's end.
- Recovered without a human: failures whose run succeeded with nobody
  requesting, approving, retrying or cancelling it (no person in its history),
  over all failures.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from clusters.models import Gpu
from reports import figures
from reports.base import NO_DATA, Report, Table, hours, minutes, percent
from reports.capacity import node_hours
from reports.intervals import Span, node_label
from reports.params import ReportQuery

NO_XID = "no XID (health check)"
UNKNOWN_MODEL = "unknown model"


def _model_of_nodes(span: Span) -> dict[str, str]:
    models: dict[str, str] = {}
    gpus = span.of_cluster(Gpu.objects, "node__cluster").exclude(model="")
    for name, model in gpus.annotate(node_name=node_label(span)).values_list("node_name", "model"):
        models.setdefault(name, model)
    return models


class Tally:
    """Failures, repair times and automatic recoveries of one group."""

    def __init__(self) -> None:
        self.failures = 0
        self.repair_s: list[float] = []
        self.automatic = 0

    def add(self, repair: figures.Repair | None) -> None:
        self.failures += 1
        if repair is not None:
            self.repair_s.append(repair.seconds)
            self.automatic += repair.automatic


def _table(name: str, heading: str, unit: str, tallies: dict, exposure: dict) -> Table:
    table = Table(
        f"by_{name}",
        heading,
        [(name, name), ("failures", "failures"), ("exposure_h", f"in-service {unit}"),
         ("mtbf_h", f"MTBF ({unit})"), ("repaired", "repaired"), ("mttr_min", "MTTR (min)"),
         ("automatic_pct", "recovered without a human %")],
    )  # fmt: skip
    for key in sorted(tallies, key=lambda key: (-tallies[key].failures, str(key))):
        tally, up = tallies[key], exposure.get(key, 0.0)
        repairs = tally.repair_s
        table.rows.append(
            {
                name: key,
                "failures": tally.failures,
                "exposure_h": hours(up),
                "mtbf_h": hours(up / tally.failures) if up else None,
                "repaired": len(repairs),
                "mttr_min": minutes(sum(repairs) / len(repairs)) if repairs else None,
                "automatic_pct": percent(tally.automatic, tally.failures),
            }
        )
    return table


def _xids(values: Iterable) -> list[str]:
    codes = sorted({int(code) for code in values or [] if str(code).isdigit()})
    return [f"XID {code}" for code in codes] or [NO_XID]


def failures(query: ReportQuery) -> Report:
    span = query.span()
    exposure_rows = node_hours(span)
    exposure = figures.in_service(exposure_rows)
    model_of = _model_of_nodes(span)
    model_up: dict[str, float] = defaultdict(float)
    for name, seconds in exposure.gpu_s.items():
        model_up[model_of.get(name, UNKNOWN_MODEL)] += seconds
    incidents = figures.failure_rows(span)
    repairs = figures.repairs_of(incidents)
    by_xid, by_model, by_node = defaultdict(Tally), defaultdict(Tally), defaultdict(Tally)
    for incident in incidents:
        node, repair = incident["node_name"], repairs.get(incident["pk"])
        for xid in _xids(incident["xids"]):
            by_xid[xid].add(repair)
        by_model[model_of.get(node, UNKNOWN_MODEL)].add(repair)
        by_node[node].add(repair)
    fleet_gpu_s = exposure.gpu_total
    report = Report("failures", "MTBF and MTTR by XID, GPU model and node", query)
    report.tables = [
        _table("xid", "By XID", "GPU-h", by_xid, {key: fleet_gpu_s for key in by_xid}),
        _table("model", "By GPU model", "GPU-h", by_model, model_up),
        _table("node", "By node", "node-h", by_node, exposure.node_s),
    ]
    fleet = figures.reliability(span, exposure, incidents, repairs)
    report.summary = {
        key: value
        for key, value in fleet.summary().items()
        if key in ("failures", "node_mtbf_h", "gpu_mtbf_h", "mttr_min", "automatic_pct")
    }
    report.notes += [
        "A failure is a critical incident opened in the range. MTBF = in-service hours / "
        "failures (GPU-hours for XIDs and GPU models, node-hours for nodes; in service = not "
        "down, failed, drained or replacing). An incident with several XIDs counts once "
        "under each.",
        "MTTR = mean time from an incident's first event to the end of its remediation run, "
        "over the runs that succeeded. Recovered without a human: the run succeeded with no "
        "person requesting, approving, retrying or cancelling it, over all failures.",
    ]
    if not exposure_rows:
        report.message = NO_DATA
    return report
