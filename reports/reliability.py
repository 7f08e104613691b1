"""Reliability reports: faults over time, MTBF, MTTR and the remediation summary."""

from __future__ import annotations

from django.db.models import Avg, Count, F, Max, Sum, Value
from django.db.models.functions import Coalesce

from remediation.models import BreakerTrip, Remediation, Trigger
from reports import figures
from reports.base import NO_DATA, Report, Table, hours, minutes
from reports.capacity import node_hours
from reports.intervals import Epoch, Span
from reports.params import ReportQuery
from reports.rollups import fault_event_counts

# Crusoe's published recovery times: ~5 min to swap a node, under 15 min end to end.
REFERENCE_REPLACE_MIN = 5.0
REFERENCE_END_TO_END_MIN = 15.0
MAX_TRIPS = 50


def faults_table(span: Span, bucket: str) -> Table:
    table = Table(
        "faults",
        "Fault events by XID code and health check",
        [("bucket", bucket), ("source", "source"), ("kind", "kind"), ("events", "events")],
    )
    rows = fault_event_counts(span)
    starts = span.bucket_starts()
    for row in rows:
        source = f"XID {row['xid']}" if row["xid"] is not None else row["check_name"] or row["kind"]
        table.rows.append(
            {
                "bucket": starts[min(int(row["k"]), span.count - 1)].date().isoformat(),
                "source": source,
                "kind": row["kind"],
                "events": row["n"],
            }
        )
    return table


def mtbf_table(span: Span, exposure: figures.InService, failures: int) -> Table:
    """Mean time between failures: in-service hours over failures, per node and per GPU."""
    table = Table(
        "mtbf",
        "Mean time between failures",
        [("scope", "per"), ("in_service_h", "in-service hours"), ("failures", "failures"),
         ("mtbf_h", "MTBF hours")],
    )  # fmt: skip
    for scope, up in (("node", exposure.node_total), ("GPU", exposure.gpu_total)):
        table.rows.append(
            {
                "scope": scope,
                "in_service_h": hours(up),
                "failures": failures,
                "mtbf_h": figures.mtbf_h(up, failures),
            }
        )
    return table


def _seconds_between(start: str, end: str):
    return Epoch(F(end)) - Epoch(F(start))


def repair_time_table(span: Span) -> Table:
    """How long each repair action's runs took, from creation to their successful end."""
    table = Table(
        "mttr",
        "Repair run time by action",
        [("action", "action"), ("runs", "runs"), ("mttr_min", "mean min"),
         ("max_min", "max min"), ("reference_min", "reference min")],
    )  # fmt: skip
    runs = (
        figures.repair_runs(span)
        .annotate(repair_s=_seconds_between("created_at", "finished_at"))
        .values("action")
        .annotate(n=Count("id"), mean=Avg("repair_s"), longest=Max("repair_s"))
        .order_by("action")
    )
    for row in runs:
        reference = REFERENCE_REPLACE_MIN if row["action"] == "replace" else None
        table.rows.append(
            {
                "action": figures.action_label(row["action"]),
                "runs": row["n"],
                "mttr_min": minutes(row["mean"]),
                "max_min": minutes(row["longest"]),
                "reference_min": reference or REFERENCE_END_TO_END_MIN,
            }
        )
    return table


def reliability(query: ReportQuery) -> Report:
    span = query.span()
    exposure = figures.in_service(node_hours(span))
    fleet = figures.reliability(span, exposure)
    report = Report("reliability", "Reliability", query)
    report.tables = [
        faults_table(span, query.bucket),
        mtbf_table(span, exposure, fleet.failures),
        repair_time_table(span),
    ]
    report.summary = {
        key: value
        for key, value in fleet.summary().items()
        if key in ("fault_events", "failures", "node_mtbf_h", "gpu_mtbf_h", "mttr_min", "repairs")
    }
    report.notes.append(
        "Fault events: XID events and failing or warning health checks, most of them "
        "warnings. A failure is a critical incident (a node's fall into down or fail is the "
        "same failure, not another). MTBF = in-service hours / failures. MTTR = the mean "
        "time from a failure's first event to the end of its successful remediation run. "
        f"Repairs: succeeded {', '.join(figures.action_label(a) for a in figures.REPAIR_ACTIONS)} "
        f"runs. Reference lines: {REFERENCE_REPLACE_MIN:g} min node replacement, "
        f"{REFERENCE_END_TO_END_MIN:g} min end to end (Crusoe)."
    )
    if not fleet.fault_events and not exposure.node_total:
        report.message = NO_DATA
    return report


# ------------------------------------------------------------------ remediation
def _runs(span: Span):
    runs = span.of_cluster(Remediation.objects, "node__cluster")
    return runs.filter(created_at__gte=span.start, created_at__lt=span.data_end)


def breaker_trips(span: Span):
    """The trips opened in the span, of the span's cluster (each trip names its own)."""
    trips = BreakerTrip.objects.filter(opened_at__gte=span.start, opened_at__lt=span.data_end)
    return span.of_cluster(trips, "cluster_id")


def runs_table(span: Span) -> Table:
    statuses = ("succeeded", "failed", "rejected", "cancelled", "active")
    table = Table(
        "runs",
        "Remediation runs by action",
        [("action", "action"), ("automatic", "automatic"), ("admin", "admin"), ("runs", "runs")]
        + [(status, status) for status in statuses],
    )
    counts = _runs(span).values("action", "trigger", "status").annotate(n=Count("id")).order_by()
    by_action: dict[str, dict] = {}
    for row in counts:
        entry = by_action.setdefault(
            row["action"],
            {"action": figures.action_label(row["action"]), "automatic": 0, "admin": 0, "runs": 0}
            | dict.fromkeys(statuses, 0),
        )
        who = "admin" if row["trigger"] == Trigger.ADMIN else "automatic"
        status = row["status"] if row["status"] in statuses else "active"
        entry[who] += row["n"]
        entry[status] += row["n"]
        entry["runs"] += row["n"]
    table.rows = [by_action[action] for action in sorted(by_action)]
    return table


def approvals_table(span: Span) -> Table:
    table = Table(
        "approvals",
        "Approval wait (created to decided)",
        [("action", "action"), ("decided", "decided"), ("mean_wait_min", "mean min"),
         ("max_wait_min", "max min")],
    )  # fmt: skip
    rows = (
        _runs(span)
        .filter(decided_at__isnull=False)
        .annotate(wait_s=_seconds_between("created_at", "decided_at"))
        .values("action")
        .annotate(n=Count("id"), mean=Avg("wait_s"), longest=Max("wait_s"))
        .order_by("action")
    )
    for row in rows:
        table.rows.append(
            {
                "action": figures.action_label(row["action"]),
                "decided": row["n"],
                "mean_wait_min": minutes(row["mean"]),
                "max_wait_min": minutes(row["longest"]),
            }
        )
    return table


def trips_table(span: Span) -> Table:
    table = Table(
        "breaker_trips",
        f"Breaker trips (latest {MAX_TRIPS})",
        [("opened_at", "opened"), ("partition", "partition"), ("open_min", "open min"),
         ("suppressed", "suppressed runs"), ("reason", "reason")],
    )  # fmt: skip
    end = Value(span.data_end)
    trips = (
        breaker_trips(span)
        .annotate(open_s=Epoch(Coalesce(F("closed_at"), end)) - Epoch(F("opened_at")))
        .order_by("-opened_at")[:MAX_TRIPS]
    )
    for trip in trips:
        table.rows.append(
            {
                "opened_at": trip.opened_at.isoformat(timespec="seconds"),
                "partition": trip.partition or "cluster",
                "open_min": minutes(max(0.0, trip.open_s)),
                "suppressed": trip.suppressed,
                "reason": trip.reason,
            }
        )
    return table


def remediation(query: ReportQuery) -> Report:
    span = query.span()
    report = Report("remediation", "Remediation summary", query)
    report.tables = [runs_table(span), approvals_table(span), trips_table(span)]
    runs = report.table("runs").rows
    trips = breaker_trips(span)
    report.summary = {
        "runs": sum(row["runs"] for row in runs),
        "automatic": sum(row["automatic"] for row in runs),
        "admin": sum(row["admin"] for row in runs),
        "breaker_trips": trips.count(),
        "suppressed": trips.aggregate(n=Sum("suppressed"))["n"] or 0,
    }
    if not report.summary["runs"] and not report.summary["breaker_trips"]:
        report.message = "No remediation runs or breaker trips in this range."
    return report
