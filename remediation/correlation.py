"""One cause, one incident: a job's own fault on several of its nodes is the job's.

When every rank of a job hits the same application fault (XID 13, 31, 43: an error in
the program, not in the GPU), every node's agent reports it within a second. Decided
node by node, that was one "restart jobs" approval per node, 64 for a 64-node job, and
a fault on the record of each healthy node. So an application-class incident on a node
that runs a multi-node job is held for a short window (MEDBAY_JOB_FAULT_WINDOW_S) while
the job's other nodes report; when another node of the same job reports an
application-class fault within the window, the incidents become one FaultGroup for the
job: no node is acted on, no node counts it, and the job's owner is told once. A lone
node's application fault (the window passed with no peer) is decided as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from agent import xid as catalogue
from clusters.backends.slurm_parsers.topology import parse_parts
from health.live import publish_events
from health.models import FaultGroup, FaultGroupKind, HealthEvent, Incident
from jobs.models import Job

# The sync may notice a job's start or end a cycle late.
JOB_TIME_SLACK = timedelta(seconds=60)
NOT_THE_HARDWARE = "an error in the application, not in the hardware"


def window() -> timedelta:
    return timedelta(seconds=float(settings.MEDBAY_JOB_FAULT_WINDOW_S))


@dataclass(frozen=True)
class Verdict:
    """What correlation says about one incident: part of a group, held, or on its own."""

    group: FaultGroup | None = None
    hold_until: datetime | None = None


def job_causes() -> frozenset[str]:
    return frozenset(settings.MEDBAY_JOB_FAULT_CAUSES)


def application_only(xids) -> bool:
    """Whether every XID of an incident is of a class a job's own fault shows as."""
    codes = [code for code in xids or [] if isinstance(code, int)]
    causes = job_causes()
    return bool(codes) and all(catalogue.lookup(code).cause in causes for code in codes)


def correlate(incident: Incident, now: datetime) -> Verdict:
    if incident.group_id is not None and _outgrew(incident):
        # A job's crash, then a hardware XID on the same GPU: no longer the job's alone.
        Incident.objects.filter(pk=incident.pk).update(group=None)
        incident.group, incident.group_id = None, None
    if incident.group_id is not None:
        # A group an admin split is decided node by node, and never formed again.
        return Verdict() if incident.group.split_at else Verdict(group=incident.group)
    if hardware_class(incident.xids):
        return _correlate_part(incident, now)
    if not application_only(incident.xids):
        return Verdict()
    job = job_at(incident.node_id, incident.opened_at)
    if job is None:
        return Verdict()
    span = window()
    peers = [
        peer
        for peer in Incident.objects.filter(
            node__in=job.nodes.all(),
            opened_at__gte=incident.opened_at - span,
            opened_at__lte=incident.opened_at + span,
        ).exclude(node_id=incident.node_id)
        if application_only(peer.xids)
    ]
    if peers:
        return Verdict(group=_join_group(job, [incident, *peers]))
    if now < incident.opened_at + span:
        return Verdict(hold_until=incident.opened_at + span)
    return Verdict()


# ----------------------------------------------------------------- shared parts
def part_causes() -> frozenset[str]:
    """Faults a shared part can cause on every node under it: the hardware, the bus, the links."""
    return frozenset(settings.MEDBAY_PART_FAULT_CAUSES)


def part_window() -> timedelta:
    return timedelta(seconds=float(settings.MEDBAY_PART_FAULT_WINDOW_S))


def part_min_nodes() -> int:
    return int(settings.MEDBAY_PART_FAULT_MIN_NODES)


def hardware_class(xids) -> bool:
    """Whether any XID of an incident is of a kind a shared part could cause."""
    codes = [code for code in xids or [] if isinstance(code, int)]
    causes = part_causes()
    return any(catalogue.lookup(code).cause in causes for code in codes)


def topology_files() -> list[Path]:
    files = [Path(path) for path in settings.MEDBAY_TOPOLOGY_FILES]
    slurm_conf = settings.SLURM_CONF
    if slurm_conf and (Path(slurm_conf).parent / "topology.conf").is_file():
        files.append(Path(slurm_conf).parent / "topology.conf")
    return files


_parts_cache: dict[tuple, dict[str, tuple[str, ...]]] = {}


def shared_parts() -> dict[str, tuple[str, ...]]:
    """Every part and its nodes, read again only when a file changed (cached by mtime)."""
    files = topology_files()
    key = tuple((str(path), path.stat().st_mtime_ns) for path in files if path.exists())
    if key not in _parts_cache:
        parts: dict[str, tuple[str, ...]] = {}
        for path, _ in key:
            parts.update(parse_parts(Path(path).read_text(), source=path))
        _parts_cache.clear()
        _parts_cache[key] = parts
    return _parts_cache[key]


def _correlate_part(incident: Incident, now: datetime) -> Verdict:
    """The same hardware-class fault on MEDBAY_PART_FAULT_MIN_NODES nodes under one part
    within the window is the part's; a fault under a part is held for the window while
    its neighbours may report; alone after it, it is the node's."""
    parts = {part: nodes for part, nodes in shared_parts().items() if incident.node.name in nodes}
    if not parts:
        return Verdict()
    span = part_window()
    nearby = Incident.objects.filter(
        node__cluster_id=incident.node.cluster_id,
        node__name__in={name for nodes in parts.values() for name in nodes},
        opened_at__gte=incident.opened_at - span,
        opened_at__lte=incident.opened_at + span,
    ).select_related("node", "group")
    nearby = [peer for peer in nearby if hardware_class(peer.xids) and peer.pk != incident.pk]
    joined = next(
        (p.group for p in nearby if p.group and p.group.kind == FaultGroupKind.PART), None
    )
    if joined is not None and joined.split_at is None:
        return Verdict(group=_join_part(joined, [incident]))
    best = max(
        parts,
        key=lambda part: len({p.node_id for p in nearby if p.node.name in parts[part]}),
    )
    peers = [p for p in nearby if p.node.name in parts[best] and p.group_id is None]
    if len({p.node_id for p in peers} | {incident.node_id}) >= part_min_nodes():
        return Verdict(group=_open_part(incident.node.cluster_id, best, [incident, *peers]))
    if now < incident.opened_at + span:
        return Verdict(hold_until=incident.opened_at + span)
    return Verdict()


def _open_part(cluster_id: int, part: str, incidents: list[Incident]) -> FaultGroup:
    group = FaultGroup.objects.create(
        kind=FaultGroupKind.PART,
        cluster_id=cluster_id,
        part=part,
        rule=(
            f"the same kind of hardware fault on {part_min_nodes()} or more nodes under"
            f" {part} within {part_window().total_seconds():g} s"
        ),
        window_s=part_window().total_seconds(),
        opened_at=min(incident.opened_at for incident in incidents),
    )
    return _join_part(group, incidents)


def _join_part(group: FaultGroup, incidents: list[Incident]) -> FaultGroup:
    # Those still waiting are decided with the group: the pass deciding each of them
    # drains its node (decision_due stays as it is for that).
    Incident.objects.filter(pk__in=[incident.pk for incident in incidents]).update(
        group=group, decide_after=None
    )
    for incident in incidents:
        incident.group, incident.group_id = group, group.pk
    group.summary = summarize_part(group)
    FaultGroup.objects.filter(pk=group.pk).update(summary=group.summary)
    transaction.on_commit(lambda: publish_events([group.pk], group.cluster_id))
    return group


def summarize_part(group: FaultGroup) -> str:
    """E.g. "XID 79 on 16 nodes under switch leaf3 within 2 s: the part is suspected"."""
    rows = list(Incident.objects.filter(group=group).values_list("node_id", "opened_at", "xids"))
    codes = sorted({code for _, _, xids in rows for code in xids or []})
    within = _spread_s([opened for _, opened, _ in rows])
    nodes = len({node for node, _, _ in rows})
    return (
        f"XID {', '.join(map(str, codes))} on {nodes} nodes under {group.part} within"
        f" {within} s: the {group.part.split()[0]} is suspected, not each node; its nodes"
        " are drained and replacing them waits for an admin's decision on the part"
    )[:500]


def grouping_rule(cause: str) -> str:
    """How an XID of this cause class is grouped across nodes, in words for its page."""
    if cause in job_causes():
        return (
            f"On two or more nodes of one job within {window().total_seconds():g} s, it is"
            " the job's own fault: one incident for the job, no node acted on."
        )
    if cause in part_causes():
        return (
            f"On {part_min_nodes()} or more nodes under one switch, rack or power feed within"
            f" {part_window().total_seconds():g} s, it is the part's fault: its nodes are"
            " drained and replacing them waits for an admin."
        )
    return ""


# ----------------------------------------------------------------- jobs
def _outgrew(incident: Incident) -> bool:
    return incident.group.kind == FaultGroupKind.JOB and not application_only(incident.xids)


def job_at(node_id: int, at: datetime) -> Job | None:
    """The multi-node job that ran on the node at `at`, if any."""
    running = Job.objects.filter(
        nodes=node_id, node_count__gte=2, superseded=False, start_at__lte=at + JOB_TIME_SLACK
    ).filter(Q(end_at__isnull=True) | Q(end_at__gte=at - JOB_TIME_SLACK))
    return running.order_by("-start_at").first()


def _join_group(job: Job, incidents: list[Incident]) -> FaultGroup:
    """The job's open group (one a peer already joined), or a new one; every incident
    joins it, is no longer waiting for a decision, and the summary is counted again."""
    joined = next((i.group for i in incidents if i.group_id is not None), None)
    group = joined or FaultGroup.objects.create(
        kind=FaultGroupKind.JOB,
        cluster_id=job.cluster_id,
        slurm_job_id=job.slurm_id,
        job_user=job.user,
        rule=(
            f"the same application-class XID on two or more nodes of job {job.slurm_id}"
            f" within {window().total_seconds():g} s"
        ),
        window_s=window().total_seconds(),
        opened_at=min(incident.opened_at for incident in incidents),
    )
    Incident.objects.filter(pk__in=[incident.pk for incident in incidents]).update(
        group=group, decision_due=False, decide_after=None
    )
    group.summary = summarize(group)
    FaultGroup.objects.filter(pk=group.pk).update(summary=group.summary)
    if joined is None:
        transaction.on_commit(lambda: _tell_the_owner(group.pk))
    # Open feeds fold the group's events into one row.
    transaction.on_commit(lambda: publish_events([group.pk], group.cluster_id))
    return group


def summarize(group: FaultGroup) -> str:
    """E.g. "XID 13 on 32 GPUs of 4 nodes within 1 s: an error in the application, ..."."""
    incidents = list(Incident.objects.filter(group=group).values_list("opened_at", "xids"))
    events = HealthEvent.objects.filter(incident__group=group, xid__isnull=False)
    gpus = set(events.values_list("node_id", "gpu_index"))
    nodes = {node for node, _ in gpus} or set(
        Incident.objects.filter(group=group).values_list("node_id", flat=True)
    )
    codes = sorted({code for _, xids in incidents for code in xids or []})
    within = _spread_s([opened for opened, _ in incidents])
    xid_words = "XID " + ", ".join(str(code) for code in codes)
    return (
        f"{xid_words} on {len(gpus)} GPU{'s' * (len(gpus) != 1)} of {len(nodes)} nodes"
        f" within {within} s: {NOT_THE_HARDWARE}"
    )[:500]


def _spread_s(times: list[datetime]) -> int:
    """Whole seconds from a group's first incident to its last, at least 1 ("within 1 s")."""
    return max(1, math.ceil((max(times) - min(times)).total_seconds()))


def job_fault_of(job: Job) -> FaultGroup | None:
    """The job's own fault, if one was grouped: for its "why did my job stop" story."""
    return (
        FaultGroup.objects.filter(
            kind=FaultGroupKind.JOB, cluster_id=job.cluster_id, slurm_job_id=job.slurm_id
        )
        .order_by("-opened_at")
        .first()
    )


def _tell_the_owner(group_pk: int) -> None:
    from jobs.notifications import notify_job_fault

    group = FaultGroup.objects.filter(pk=group_pk).first()
    job = Job.objects.filter(
        cluster_id=group.cluster_id, slurm_id=group.slurm_job_id, superseded=False
    ).first()
    if job is not None:
        notify_job_fault(job, summary=group.summary)
