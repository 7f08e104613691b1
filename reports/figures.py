"""The figures several reports show, each defined and computed here once.

Every tab that shows one of these reads it from here, so two tabs can never
print two numbers for the same thing (they once did: Reliability counted fault
events and called them faults, its MTBF table added a node's fall into
down/fail to the critical incident that caused it, and MTBF/MTTR divided by
another count again).

- fault events: XID events and failing or warning health checks observed in
  the range (many are warnings that take nothing out of service);
- failures: critical incidents opened in the range (an XID burst or a failed
  check that went critical). A node's fall into down/fail is the same failure
  seen from Slurm, so it is not counted again;
- in service: not down, failed, drained or replacing;
- MTBF = in-service hours / failures: per node in node-hours, for the fleet's
  GPUs in GPU-hours;
- repairs: succeeded runs of the actions that fix a node or a GPU (REPAIR_ACTIONS;
  moving a node between pools is not a repair);
- MTTR = the mean, over failures whose remediation run succeeded, of the time
  from the incident's first event to the run's end;
- lost work and restore (goodput.lost_work, beside the SQL that measures them):
  GPUs x (the stop - the later of the attempt's start and its last checkpoint),
  and GPUs x (running again - the first progress report after it), over the
  interruptions in the range of jobs that report progress.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db.models import Count

from health.models import Incident, Severity
from remediation.models import Action, Remediation, RemediationStatusChange
from remediation.transitions import RunStatus
from reports.base import percent
from reports.intervals import Span, node_label
from reports.rollups import fault_event_counts

# The actions that fix what failed. Moving a node to inference or training, cordoning,
# draining or notifying changes where work runs, not whether the hardware works.
REPAIR_ACTIONS = (Action.RESET_GPU, Action.REBOOT, Action.REPLACE, Action.RESTART_APP)


def action_label(action: str) -> str:
    """ "reset_gpu" -> "Reset GPU", as the remediation pages name actions."""
    try:
        return str(Action(action).label)
    except ValueError:
        return action.replace("_", " ")


def critical_incidents(span: Span):
    """The span's failures, each with `node_name` as the reports name its node."""
    incidents = span.of_cluster(Incident.objects, "node__cluster").filter(
        severity=Severity.CRITICAL, opened_at__gte=span.start, opened_at__lt=span.data_end
    )
    return incidents.annotate(node_name=node_label(span))


def failure_rows(span: Span) -> list[dict]:
    """Each failure in the span: pk, node name, GPU index, XIDs and when it opened."""
    return list(
        critical_incidents(span)
        .values("pk", "node_name", "gpu_index", "xids", "opened_at")
        .order_by("opened_at", "pk")
    )


def failures_per_node(span: Span) -> dict[str, int]:
    rows = critical_incidents(span).values("node_name").annotate(n=Count("id")).order_by()
    return {row["node_name"]: row["n"] for row in rows}


def failures_per_gpu(span: Span) -> dict[tuple[str, int], int]:
    rows = (
        critical_incidents(span)
        .filter(gpu_index__isnull=False)
        .values("node_name", "gpu_index")
        .annotate(n=Count("id"))
        .order_by()
    )
    return {(row["node_name"], row["gpu_index"]): row["n"] for row in rows}


def fault_event_count(span: Span) -> int:
    return sum(row["n"] for row in fault_event_counts(span))


@dataclass(frozen=True)
class InService:
    """In-service seconds per node: node-seconds and GPU-seconds."""

    node_s: dict[str, float]
    gpu_s: dict[str, float]

    @property
    def node_total(self) -> float:
        return sum(self.node_s.values())

    @property
    def gpu_total(self) -> float:
        return sum(self.gpu_s.values())


def in_service(rows: list[dict]) -> InService:
    """From `capacity.node_hours` rows (capacity reads the failure counts here, so the
    caller reads the rows)."""
    return InService(
        {row["node_name"]: max(0.0, row["installed_s"] - row["down_s"]) for row in rows},
        {row["node_name"]: max(0.0, row["gpu_up_s"]) for row in rows},
    )


def mtbf_h(in_service_s: float, failures: int) -> float | None:
    """Mean time between failures in hours; None (no figure) without a failure."""
    return round(in_service_s / failures / 3600, 2) if failures else None


@dataclass(frozen=True)
class Repair:
    """How a failure's run ended: seconds from the incident's first event, no person."""

    seconds: float
    automatic: bool


def repairs_of(failures: list[dict]) -> dict[int, Repair]:
    """incident pk -> its successful run's repair, for the FAILURES that have one."""
    opened = {row["pk"]: row["opened_at"] for row in failures}
    runs = list(
        Remediation.objects.filter(
            incident_id__in=list(opened), status=RunStatus.SUCCEEDED, finished_at__isnull=False
        )
        .values("pk", "incident_id", "finished_at", "requested_by_id", "approved_by_id")
        .order_by("finished_at", "pk")
    )
    people = set(get_user_model().objects.values_list("username", flat=True))
    touched = set(
        RemediationStatusChange.objects.filter(
            remediation_id__in=[run["pk"] for run in runs], actor__in=people
        ).values_list("remediation_id", flat=True)
    )
    repairs = {}
    for run in runs:
        human = bool(run["requested_by_id"] or run["approved_by_id"]) or run["pk"] in touched
        seconds = max(0.0, (run["finished_at"] - opened[run["incident_id"]]).total_seconds())
        # The first run that succeeded repaired it; a later one found nothing to fix.
        repairs.setdefault(run["incident_id"], Repair(seconds, not human))
    return repairs


def mttr_min(repairs) -> float | None:
    seconds = [repair.seconds for repair in repairs]
    return round(sum(seconds) / len(seconds) / 60, 1) if seconds else None


def repair_runs(span: Span):
    """Succeeded runs of REPAIR_ACTIONS created in the span."""
    return span.of_cluster(Remediation.objects, "node__cluster").filter(
        action__in=REPAIR_ACTIONS,
        status=RunStatus.SUCCEEDED,
        finished_at__isnull=False,
        created_at__gte=span.start,
        created_at__lt=span.data_end,
    )


@dataclass(frozen=True)
class Reliability:
    """The fleet's failure figures over a span, as every tab shows them."""

    fault_events: int
    failures: int
    node_mtbf_h: float | None
    gpu_mtbf_h: float | None
    mttr_min: float | None
    automatic_pct: float
    repairs: int

    def summary(self) -> dict:
        return {
            "fault_events": self.fault_events,
            "failures": self.failures,
            "node_mtbf_h": self.node_mtbf_h,
            "gpu_mtbf_h": self.gpu_mtbf_h,
            "mttr_min": self.mttr_min,
            "repairs": self.repairs,
            "automatic_pct": self.automatic_pct,
        }


def reliability(
    span: Span,
    exposure: InService,
    failures: list[dict] | None = None,
    repairs: dict[int, Repair] | None = None,
) -> Reliability:
    """The fleet's figures; FAILURES and their REPAIRS when the caller already read them."""
    failures = failure_rows(span) if failures is None else failures
    repairs = repairs_of(failures) if repairs is None else repairs
    return Reliability(
        fault_events=fault_event_count(span),
        failures=len(failures),
        node_mtbf_h=mtbf_h(exposure.node_total, len(failures)),
        gpu_mtbf_h=mtbf_h(exposure.gpu_total, len(failures)),
        mttr_min=mttr_min(repairs.values()),
        automatic_pct=percent(sum(r.automatic for r in repairs.values()), len(failures)),
        repairs=repair_runs(span).count(),
    )
