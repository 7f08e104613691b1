"""Which free spares Medbay offers for a replacement, best first, and which it skips.

Slurm (or Kubernetes) knows which spares are idle and schedulable, and nothing of
what their agents reported: a spare whose GPU fell off the bus an hour ago is as
idle to Slurm as a sound one. Offering the first free spare by name put such a
node into service and then waited on a validation that could not pass. Every fleet
lists the spares it sees free (`spare_capacity`); this module alone decides which
of them Medbay offers and in what order, and the fleet brings in the one it is
given, so the simulator, the Slurm spare pool and Kubernetes choose alike.

A free spare is not offered while Medbay knows it is unsound:
- a GPU the agents' reports left failed or degraded (the GPU rows' health);
- an open incident: one not cleared (`cleared_at`: its failed check passed again)
  whose burst may still grow (its last event within health.ingest.INCIDENT_SILENCE;
  after that silence the ingest opens a new one), or that the remediation trigger
  has not decided yet (`decision_due`);
- an active remediation run of its own;
- in repair: where a node goes when it fails validation as a replacement, or when
  its own fault is remediated as a spare, until a return-to-service run validates it.
The others are ranked by GPUs of unknown health, then by their recent faults
(safety.fault_counts: critical incidents in the flapping window), then by name.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Q
from django.utils import timezone

from clusters.models import Gpu, GpuHealth, Node
from health.ingest import INCIDENT_SILENCE
from health.models import Incident
from remediation import safety
from remediation.models import Remediation, action_words, status_words
from remediation.transitions import ACTIVE

UNSOUND_GPU = (GpuHealth.FAILED, GpuHealth.DEGRADED)


@dataclass(frozen=True)
class SpareChoice:
    """The free spares Medbay offers, best first, and those it skipped with why."""

    offered: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    def skipped_text(self) -> str:
        """`gpu-30 (GPU 6 failed: XID 79)`, one per skipped spare, in name order."""
        return "; ".join(f"{name} ({why})" for name, why in sorted(self.skipped.items()))

    def describe(self) -> str:
        """What the eligibility step and the impact preview say about the spare pool."""
        text = f"{len(self.offered)} healthy free spare(s): {', '.join(self.offered) or 'none'}"
        if self.skipped:
            text += f"; not offered: {self.skipped_text()}"
        return text


def choose(
    cluster_id: int,
    free: Iterable[str],
    *,
    exclude: Iterable[str] = (),
    now: datetime | None = None,
) -> SpareChoice:
    """Rank the FREE spares (names the fleet reports) of a cluster, leaving out the
    EXCLUDED names (the node being replaced, spares already rejected by this run)."""
    names = sorted(set(free) - set(exclude))
    if not names:
        return SpareChoice()
    problems = unsound(cluster_id, names, now=now)
    sound = [name for name in names if name not in problems]
    ids = dict(Node.objects.filter(cluster_id=cluster_id, name__in=sound).values_list("name", "pk"))
    unknown = _unknown_gpus(ids.values())
    faults = safety.fault_counts(ids.values())

    def rank(name: str) -> tuple:
        node_id = ids.get(name)
        return (unknown.get(node_id, 0), faults.get(node_id, 0), name)

    return SpareChoice(offered=sorted(sound, key=rank), skipped=problems)


def unsound(
    cluster_id: int, names: Iterable[str], *, now: datetime | None = None
) -> dict[str, str]:
    """Name -> why Medbay would not put that node into service as a spare, for those
    of NAMES it knows to be unsound (a name it has no record of is not listed)."""
    now = now or timezone.now()
    nodes = Node.objects.filter(cluster_id=cluster_id, name__in=list(names))
    rows = list(nodes.values_list("pk", "name", "in_repair_since", "repair_note"))
    name_of = {pk: name for pk, name, _, _ in rows}
    why: dict[int, list[str]] = defaultdict(list)
    for pk, gpus in _unsound_gpus(name_of).items():
        why[pk].append(gpus)
    for pk, text in _open_incidents(name_of, now).items():
        why[pk].append(text)
    for pk, text in _active_runs(name_of).items():
        why[pk].append(text)
    for pk, _, since, note in rows:
        if since is not None:
            why[pk].append(f"in repair since {since:%Y-%m-%d %H:%M}: {note}".rstrip(": "))
    return {name_of[pk]: "; ".join(texts) for pk, texts in why.items()}


def _unsound_gpus(name_of: dict[int, str]) -> dict[int, str]:
    gpus = (
        Gpu.objects.filter(node_id__in=list(name_of), health__in=UNSOUND_GPU)
        .order_by("node_id", "index")
        .values_list("node_id", "index", "health", "health_reason")
    )
    found: dict[int, list[str]] = defaultdict(list)
    for node_id, index, health, reason in gpus:
        found[node_id].append(f"GPU {index} {health}" + (f": {reason}" if reason else ""))
    return {node_id: ", ".join(texts) for node_id, texts in found.items()}


def _open_incidents(name_of: dict[int, str], now: datetime) -> dict[int, str]:
    incidents = (
        Incident.objects.filter(node_id__in=list(name_of), cleared_at__isnull=True)
        .filter(Q(last_event_at__gte=now - INCIDENT_SILENCE) | Q(decision_due=True))
        .order_by("node_id", "-last_event_at")
        .values_list("node_id", "pk", "xids", "last_event_at")
    )
    found: dict[int, str] = {}
    for node_id, pk, xids, last in incidents:
        codes = f"XID {', '.join(map(str, xids))}, " if xids else ""
        found.setdefault(node_id, f"open incident {pk} ({codes}last event {last:%H:%M:%S})")
    return found


def _active_runs(name_of: dict[int, str]) -> dict[int, str]:
    runs = Remediation.objects.filter(
        node_id__in=list(name_of), status__in=[str(s) for s in ACTIVE]
    )
    return {
        node_id: f"in remediation by run {pk} ({action_words(action)}, {status_words(status)})"
        for node_id, pk, action, status in runs.values_list("node_id", "pk", "action", "status")
    }


def _unknown_gpus(node_ids) -> dict[int, int]:
    counts: dict[int, int] = defaultdict(int)
    unknown = Gpu.objects.filter(node_id__in=list(node_ids), health=GpuHealth.UNKNOWN)
    for node_id in unknown.values_list("node_id", flat=True):
        counts[node_id] += 1
    return counts
