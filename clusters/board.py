"""The node-health board: the queries behind it and its tile fragments.

A 2,048-node board has 16,384 GPU cells. Rendering them through the template
engine costs several hundred milliseconds, so tiles are built here with
escaped string formatting from two `values()` queries; the page template and
the live update both use `render_tile`, so they can never disagree.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from django.db.models import Count, Q
from django.urls import reverse
from django.utils.html import escape

from clusters.models import Gpu, GpuHealth, Node, NodeStatus

OUT_OF_SERVICE = frozenset(
    {
        NodeStatus.DRAINING,
        NodeStatus.DRAINED,
        NodeStatus.DOWN,
        NodeStatus.FAIL,
        NodeStatus.REPLACING,
    }
)
NODE_COLUMNS = ("id", "name", "status", "reason", "partition_names", "pool__kind", "gpus_used")


@dataclass(frozen=True)
class BoardFilter:
    partition: str = ""
    pool: str = ""
    status: str = ""

    @classmethod
    def from_query(cls, params) -> BoardFilter:
        return cls(
            partition=params.get("partition", "")[:64],
            pool=params.get("pool", "")[:16],
            status=params.get("state", "")[:16],
        )

    def apply(self, nodes):
        if self.partition:
            nodes = nodes.filter(partitions__name=self.partition)
        if self.pool:
            nodes = nodes.filter(pool__kind=self.pool)
        if self.status:
            nodes = nodes.filter(status=self.status)
        return nodes


@dataclass
class GpuCounts:
    healthy: int = 0
    degraded: int = 0
    failed: int = 0
    in_remediation: int = 0

    @property
    def total(self) -> int:
        return self.healthy + self.degraded + self.failed + self.in_remediation


def board_rows(node_filter: BoardFilter, node_ids=None) -> tuple[list[dict], dict[int, list]]:
    """Node rows and each node's GPU (index, health, reason) cells: two queries."""
    nodes = node_filter.apply(Node.objects.all())
    if node_ids is not None:
        nodes = nodes.filter(id__in=node_ids)
    rows = list(nodes.order_by("name").values(*NODE_COLUMNS))
    gpus: dict[int, list] = defaultdict(list)
    gpu_query = Gpu.objects.order_by("node_id", "index")
    if node_ids is not None or node_filter != BoardFilter():
        gpu_query = gpu_query.filter(node_id__in=[row["id"] for row in rows])
    for node_id, index, health, reason in gpu_query.values_list(
        "node_id", "index", "health", "health_reason"
    ):
        gpus[node_id].append((index, health, reason))
    return rows, gpus


def count_gpus(rows: list[dict], gpus: dict[int, list]) -> GpuCounts:
    counts = GpuCounts()
    for row in rows:
        out = row["status"] in OUT_OF_SERVICE
        for _index, health, _reason in gpus.get(row["id"], ()):
            if health == GpuHealth.FAILED:
                counts.failed += 1
            elif out:
                counts.in_remediation += 1
            elif health == GpuHealth.DEGRADED:
                counts.degraded += 1
            else:
                counts.healthy += 1
    return counts


def cluster_gpu_counts() -> GpuCounts:
    """Counts for the whole cluster, for live updates (one grouped query)."""
    counts = GpuCounts()
    grouped = Gpu.objects.values_list("health", "node__status").annotate(n=Count("id")).order_by()
    for health, status, number in grouped:
        if health == GpuHealth.FAILED:
            counts.failed += number
        elif status in OUT_OF_SERVICE:
            counts.in_remediation += number
        elif health == GpuHealth.DEGRADED:
            counts.degraded += number
        else:
            counts.healthy += number
    return counts


def render_tile(row: dict, cells: list, *, oob: bool = False) -> str:
    name = escape(row["name"])
    url = reverse("node-detail", args=[row["name"]])
    status = escape(row["status"])
    title = escape(row["reason"]) if row["reason"] else status
    gpu_cells = "".join(
        f'<span class="gpu gpu-{escape(health)}" title="GPU {index}: '
        f'{escape(health)}{": " + escape(reason) if reason else ""}"></span>'
        for index, health, reason in cells
    )
    oob_attr = ' hx-swap-oob="true"' if oob else ""
    pool = escape(row.get("pool__kind") or "")
    return (
        f'<a class="tile status-{status} pool-{pool}" id="node-{name}" href="{url}"'
        f' data-status="{status}" title="{title}"{oob_attr}>'
        f'<span class="tile-name">{name}</span>'
        f'<span class="badge badge-{status}">{status}</span>'
        f'<span class="gpus">{gpu_cells}</span></a>'
    )


def render_tiles(rows: list[dict], gpus: dict[int, list]) -> str:
    return "".join(render_tile(row, gpus.get(row["id"], [])) for row in rows)


def out_of_service_filter() -> Q:
    return Q(status__in=OUT_OF_SERVICE)
