"""Usage by account (team), user, partition and QOS, from Slurm's own accounting.

Read from the records `manage.py import_accounting` stores (jobs.AccountingJob),
so it covers jobs from before Medbay was installed, and its GPU-hours are the
figure Slurm's `sreport job SizesByAccount -T gres/gpu` prints for the same
window: every attempt of a job (a requeued one's earlier attempts too, as
sreport asks with duplicates), allocated gres/gpu times the part of the attempt
inside the window (slurmdbd truncates each job's time to the window for sreport).
"""

from __future__ import annotations

from django.db.models import Avg, Count, F, FloatField, Q, Sum
from django.db.models.functions import Coalesce

from jobs.models import AccountingJob
from reports.base import Report, Table, hours, minutes, percent
from reports.intervals import Epoch, Span
from reports.params import ReportQuery

GROUPS = ("account", "user", "partition", "qos")
DEFAULT_GROUP = "account"
# States of a final attempt that mean the job did not finish its work.
FAILED_STATES = ("FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")
NO_RECORDS = (
    "No accounting records in this range yet: run `manage.py import_accounting` "
    "(with --since for the history before Medbay); the figures below are zero."
)
COLUMNS = [
    ("gpu_h", "GPU-h"),
    ("gpu_s", "GPU-seconds"),
    ("share_pct", "share %"),
    ("jobs", "jobs ended"),
    ("failed", "failed"),
    ("cancelled", "cancelled"),
    ("restarts", "restarts"),
    ("requeued_gpu_h", "GPU-h of requeued attempts"),
    ("mean_wait_min", "mean queue wait (min)"),
]


def usage_rows(span: Span, group: str) -> list[dict]:
    """One dict of sums per group value over SPAN, computed by the database."""
    ended = Q(end_at__gte=span.start, end_at__lt=span.end) & ~Q(state="REQUEUED")
    records = (
        span.of_cluster(AccountingJob.objects, "cluster")
        .filter(end_at__gt=span.start)
        # An attempt that never started used nothing; it counts only as a job ended.
        .filter(Q(start_at__lt=span.data_end) | Q(start_at__isnull=True, end_at__lt=span.end))
        .annotate(**span.clip(Coalesce(F("start_at"), F("end_at")), F("end_at")))
        .annotate(gpu_seconds=F("gpus") * (F("e_off") - F("s_off")))
    )
    return list(
        records.values(group)
        .annotate(
            used=Coalesce(Sum("gpu_seconds", filter=Q(e_off__gt=F("s_off"))), 0.0),
            requeued=Coalesce(
                Sum("gpu_seconds", filter=Q(state="REQUEUED", e_off__gt=F("s_off"))), 0.0
            ),
            jobs=Count("pk", filter=ended),
            failed=Count("pk", filter=ended & Q(state__in=FAILED_STATES)),
            cancelled=Count("pk", filter=ended & Q(state="CANCELLED")),
            restarts=Coalesce(Sum("restarts", filter=ended), 0),
            wait=Avg(
                Epoch(F("start_at")) - Epoch(F("submit_at")),
                filter=Q(start_at__isnull=False, start_at__gte=span.start),
                output_field=FloatField(),
            ),
        )
        .order_by(group)
    )


def requeued_gpu_h(row: dict) -> float | None:
    """GPU-hours of a group's requeued attempts; None (unknown, shown as a dash) when its
    jobs restarted but the accounting holds none of their earlier attempts: Slurm lists
    them only with `sacct --duplicates`, and a simulator keeps none, so 0.0 would be false."""
    if row["restarts"] and not row["requeued"]:
        return None
    return hours(row["requeued"])


def usage(query: ReportQuery) -> Report:
    group = query.group if query.group in GROUPS else DEFAULT_GROUP
    rows = usage_rows(query.span(), group)
    total = sum(row["used"] for row in rows)
    table = Table("usage", f"GPU-hours by {group} (Slurm accounting)", [("group", group), *COLUMNS])
    for row in sorted(rows, key=lambda row: (-row["used"], row[group])):
        table.rows.append(
            {
                "group": row[group],
                "gpu_h": hours(row["used"]),
                "gpu_s": round(row["used"]),
                "share_pct": percent(row["used"], total),
                "jobs": row["jobs"],
                "failed": row["failed"],
                "cancelled": row["cancelled"],
                "restarts": row["restarts"],
                "requeued_gpu_h": requeued_gpu_h(row),
                "mean_wait_min": minutes(row["wait"]) if row["wait"] is not None else None,
            }
        )
    jobs = sum(row["jobs"] for row in rows)
    report = Report("accounting", "Usage by account, user, partition and QOS", query)
    report.tables.append(table)
    report.summary = {
        "GPU-h": hours(total),
        "jobs ended": jobs,
        "failed %": percent(sum(row["failed"] for row in rows), jobs),
        "restarts": sum(row["restarts"] for row in rows),
    }
    report.notes += [
        "Source: Slurm's accounting (slurmdbd, read with sacct by `manage.py import_accounting`), "
        "including jobs from before Medbay was installed.",
        "GPU-h: allocated GPUs (TRES gres/gpu) × the time each attempt ran inside the range, "
        "requeued attempts included: the figure `sreport job SizesByAccount -T gres/gpu` "
        "gives for the same range.",
        "Jobs ended, failed, cancelled and restarts count jobs whose final attempt ended in "
        "the range; failed means FAILED, NODE_FAIL, TIMEOUT, OUT_OF_MEMORY, BOOT_FAIL or "
        "DEADLINE. Queue wait is from submit (the attempt's own, after a requeue) to start.",
    ]
    if any(row["requeued_gpu_h"] is None for row in table.rows):
        report.notes.append(
            "GPU-h of requeued attempts is blank where jobs restarted but Slurm's accounting "
            "holds none of their earlier attempts."
        )
    if query.group and group != query.group:
        report.notes.append(f"Grouped by {group}: this report splits by {', '.join(GROUPS)}.")
    if not rows:
        report.message = NO_RECORDS
    return report
