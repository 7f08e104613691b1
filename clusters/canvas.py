"""The fleet view: every GPU of a large cluster at a glance, from a compact payload.

A 12,500-node board as tiles is 100,000 DOM cells and megabytes of HTML; here the
page is small and static/js/fleet.js draws each GPU as a few pixels of a canvas,
grouped by partition, from one JSON payload: per group its cluster, the node names
and one letter per GPU (`STATE_CODES`). A change is sent to open fleet pages as the
new letters of the nodes that changed (`delta`), which the page paints in place.
Nodes are known by cluster and name: on a fleet of all clusters two clusters may
each have a gpu-01, and each must get its own letters.
The letters follow the board's counts (`GpuCounts.add`), so the two never
disagree about what a GPU is.
"""

from __future__ import annotations

from collections import defaultdict

from django.conf import settings
from django.db.models import Count, Q

from clusters.board import OUT_OF_SERVICE, BoardFilter, GpuCounts
from clusters.models import Gpu, GpuHealth, Node

# One letter per GPU state, in the counts' order; fleet.js has the same table.
HEALTHY, DEGRADED, FAILED, REMEDIATION, OUT = "h", "d", "f", "r", "o"
STATE_CODES = {
    HEALTHY: "healthy",
    DEGRADED: "degraded",
    FAILED: "failed",
    REMEDIATION: "in remediation",
    OUT: "out of service",
}
UNGROUPED = "(no partition)"
# The table of non-healthy nodes (for keyboard and screen-reader users) stops here;
# beyond it the page says how many more there are and offers the state filters.
PROBLEM_ROWS = 200


def tiles_max() -> int:
    """Above this many nodes (after filters) the board is the fleet view, not tiles."""
    return int(settings.MEDBAY_BOARD_TILES_MAX)


def gpu_code(health: str, node_status: str, remediation: str) -> str:
    """The GPU's letter: as `GpuCounts.add` counts it."""
    if health == GpuHealth.FAILED:
        return FAILED
    if remediation:
        return REMEDIATION
    if node_status in OUT_OF_SERVICE:
        return OUT
    if health == GpuHealth.DEGRADED:
        return DEGRADED
    return HEALTHY


def _nodes(node_filter: BoardFilter, node_ids=None):
    nodes = node_filter.apply(Node.objects.all())
    if node_ids is not None:
        nodes = nodes.filter(id__in=node_ids)
    return nodes.order_by("name").values_list(
        "id", "name", "status", "active_remediation", "partition_names", "cluster__name"
    )


def _codes_by_node(node_ids=None) -> dict[int, list[str]]:
    """Each node's GPU health values in index order: one query, tuples only."""
    gpus = Gpu.objects.order_by("node_id", "index")
    if node_ids is not None:
        gpus = gpus.filter(node_id__in=node_ids)
    health: dict[int, list[str]] = defaultdict(list)
    for node_id, value in gpus.values_list("node_id", "health"):
        health[node_id].append(value)
    return health


def _letters(health: list[str], status: str, remediation: str) -> str:
    return "".join([gpu_code(value, status, remediation) for value in health])


def payload(node_filter: BoardFilter) -> dict:
    """What fleet.js draws: per partition of each cluster, its node names and one letter
    per GPU."""
    nodes = list(_nodes(node_filter))
    unfiltered = node_filter == BoardFilter()
    health = _codes_by_node(None if unfiltered else [row[0] for row in nodes])
    groups: dict[tuple[str, str], dict] = {}
    for node_id, name, status, remediation, partitions, cluster in nodes:
        group_name = partitions.split(",")[0] if partitions else UNGROUPED
        group = groups.setdefault(
            (group_name, cluster), {"name": group_name, "cluster": cluster, "nodes": [], "gpus": []}
        )
        group["nodes"].append(name)
        group["gpus"].append(_letters(health.get(node_id, []), status, remediation))
    return {"states": STATE_CODES, "groups": [groups[key] for key in sorted(groups)]}


def delta(rows: list[dict], gpus: dict[int, list]) -> dict:
    """The new letters of the changed nodes, each as [cluster, name, letters] (the
    board's own rows for them: no query of its own), for pages already showing the fleet."""
    return {
        "fleet": [
            [
                row["cluster__name"],
                row["name"],
                _letters(
                    [health for _, health, _ in gpus.get(row["id"], [])],
                    row["status"],
                    row["active_remediation"],
                ),
            ]
            for row in rows
        ]
    }


def counts(node_filter: BoardFilter) -> GpuCounts:
    """The board's counts, grouped in the database: a few rows, not one per GPU."""
    gpus = Gpu.objects.filter(node__in=node_filter.apply(Node.objects.all()).values("id"))
    result = GpuCounts()
    for health, status, remediation, number in (
        gpus.values_list("health", "node__status", "node__active_remediation")
        .annotate(n=Count("id"))
        .order_by()
    ):
        result.add(health, status, remediation, number)
    return result


def problem_rows(node_filter: BoardFilter) -> tuple[list[dict], int]:
    """The first PROBLEM_ROWS nodes (by name) with a GPU not healthy or out of service,
    and how many there are."""
    unhealthy = Gpu.objects.exclude(health=GpuHealth.HEALTHY).values("node_id")
    nodes = node_filter.apply(Node.objects.all()).filter(
        Q(id__in=unhealthy) | Q(status__in=sorted(OUT_OF_SERVICE)) | ~Q(active_remediation="")
    )
    total = nodes.count()
    rows = list(
        nodes.order_by("name", "cluster__name").values(
            "id",
            "name",
            "status",
            "reason",
            "active_remediation",
            "partition_names",
            "cluster__name",
        )[:PROBLEM_ROWS]
    )
    health = _codes_by_node([row["id"] for row in rows])
    for row in rows:
        letters = _letters(health.get(row["id"], []), row["status"], row["active_remediation"])
        row["gpus"] = [
            (index, STATE_CODES[letter])
            for index, letter in enumerate(letters)
            if letter != HEALTHY
        ]
    return rows, total
