"""The node-health board: the queries behind it and its tile fragments.

A 2,048-node board has 16,384 GPU cells. Rendering them through the template
engine costs several hundred milliseconds, so tiles are built here with
escaped string formatting from two `values()` queries; the page template and
the live update both use `render_tile`, so they can never disagree.
"""

from __future__ import annotations

import html
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import quote

from django.db.models import Exists, OuterRef
from django.urls import reverse

from clusters.models import Cluster, Gpu, GpuHealth, Node, NodeStatus

OUT_OF_SERVICE = frozenset(
    {
        NodeStatus.DRAINING,
        NodeStatus.DRAINED,
        NodeStatus.DOWN,
        NodeStatus.FAIL,
        NodeStatus.REPLACING,
        NodeStatus.IN_REPAIR,
    }
)
NODE_COLUMNS = (
    "id", "name", "status", "reason", "held_by", "fleet_held_by", "partition_names",
    "pool__kind", "gpus_used", "active_remediation", "cluster_id", "cluster__name",
)  # fmt: skip


@dataclass(frozen=True)
class BoardFilter:
    partition: str = ""
    pool: str = ""
    status: str = ""
    # The cluster the page shows (identity.cluster_view); None: every cluster.
    cluster_id: int | None = None

    @classmethod
    def from_query(cls, params) -> BoardFilter:
        return cls(
            partition=params.get("partition", "")[:64],
            pool=params.get("pool", "")[:16],
            status=params.get("state", "")[:16],
        )

    def apply(self, nodes):
        if self.cluster_id is not None:
            nodes = nodes.filter(cluster_id=self.cluster_id)
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
    out_of_service: int = 0

    def add(self, health: str, node_status: str, remediation: str = "", number: int = 1) -> None:
        """A failed GPU counts as failed wherever it is. The others on a node that a
        run is acting on count as in remediation; on a node out of service with no
        run (drained by an admin, or failed and waiting for repair after its
        replacement), as out of service."""
        if health == GpuHealth.FAILED:
            self.failed += number
        elif remediation:
            self.in_remediation += number
        elif node_status in OUT_OF_SERVICE:
            self.out_of_service += number
        elif health == GpuHealth.DEGRADED:
            self.degraded += number
        else:
            self.healthy += number

    @property
    def total(self) -> int:
        return (
            self.healthy + self.degraded + self.failed + self.in_remediation + self.out_of_service
        )


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
        for _index, health, _reason in gpus.get(row["id"], ()):
            counts.add(health, row["status"], row["active_remediation"])
    return counts


# Django's `escape` is wrapped for lazy strings and costs several times the
# stdlib's; the output is identical (`html.escape` with quotes).
_escape = html.escape
# What `reverse` does to a path argument (RFC 3986 sub-delims stay readable).
_URL_SAFE = "!$&'()*+,;=/~:@"


@lru_cache(maxsize=4096)
def _gpu_cell(index: int, health: str, reason: str) -> str:
    # A board repeats a handful of (index, health) pairs thousands of times.
    detail = f"{_escape(health)}: {_escape(reason)}" if reason else _escape(health)
    return f'<span class="gpu gpu-{_escape(health)}" title="GPU {index}: {detail}"></span>'


# Stand for the cluster and node names in a URL reversed once per render, not per tile.
_NAME_MARKER = "medbay-node-name"
_CLUSTER_MARKER = "medbay-cluster-name"


def _node_url_template() -> str:
    # Not cached across calls: the script prefix is per request/thread.
    return reverse("cluster-node", args=[_CLUSTER_MARKER, _NAME_MARKER])


def banner_context(cluster: Cluster | None) -> dict:
    """What the board's banner speaks for (clusters/partials/banner.html): CLUSTER, or
    with None every enabled cluster, each problem then named by its cluster where
    there are several."""
    clusters = [cluster] if cluster else list(Cluster.objects.filter(enabled=True).order_by("name"))
    several = len(clusters) > 1
    return {
        "banner_clusters": clusters,
        "banner_several": several,
        # The breaker's trips and refusals shown: of one cluster, or of all (None).
        "banner_one": cluster if cluster and Cluster.objects.count() > 1 else None,
    }


def tiles_qualified() -> bool:
    """Whether a board of all clusters names its tiles by cluster too: where more than
    one cluster has nodes, two of them may share a name (one small query)."""
    with_nodes = Cluster.objects.filter(Exists(Node.objects.filter(cluster=OuterRef("pk"))))
    return with_nodes[:2].count() > 1


def tile_id(row: dict, *, qualified: bool = False) -> str:
    """A tile's element id: `node-<name>`, or `node-<cluster>-<name>` on a board of
    several clusters, where two may have a node of the same name."""
    if qualified:
        return f"node-{row['cluster__name']}-{row['name']}"
    return f"node-{row['name']}"


def render_tile(
    row: dict, cells: list, *, oob: bool = False, url_template: str = "", qualified: bool = False
) -> str:
    template = url_template or _node_url_template()
    url = _escape(
        template.replace(_CLUSTER_MARKER, quote(row["cluster__name"], safe=_URL_SAFE)).replace(
            _NAME_MARKER, quote(row["name"], safe=_URL_SAFE)
        )
    )
    name = _escape(row["name"])
    status = _escape(row["status"])
    title = _escape(row["reason"]) if row["reason"] else status
    held = "; ".join(filter(None, (row.get("held_by"), row.get("fleet_held_by"))))
    held_attr = f' data-held-by="{_escape(held)}"' if held else ""
    held_mark = _HELD_MARK.format(held=_escape(held)) if held else ""
    gpu_cells = "".join([_gpu_cell(index, health, reason or "") for index, health, reason in cells])
    oob_attr = ' hx-swap-oob="true"' if oob else ""
    pool = _escape(row.get("pool__kind") or "")
    cluster = _escape(row["cluster__name"])
    element_id = _escape(tile_id(row, qualified=qualified))
    return (
        f'<a class="tile status-{status} pool-{pool}" id="{element_id}"'
        f' href="{url}" data-cluster="{cluster}"'
        f' data-status="{status}" title="{title}"{held_attr}{oob_attr}>'
        f'<span class="tile-name">{name}</span>'
        f'<span class="badge badge-{status}">{status}</span>'
        f"{held_mark}"
        f'<span class="gpus">{gpu_cells}</span></a>'
    )


# A small marker on tiles someone other than Medbay holds out of service.
_HELD_MARK = '<span class="held" title="held by {held}">&#9873;</span>'


def render_tiles(
    rows: list[dict], gpus: dict[int, list], *, oob: bool = False, qualified: bool = False
) -> str:
    template = _node_url_template()
    return "".join(
        [
            render_tile(
                row, gpus.get(row["id"], []), oob=oob, url_template=template, qualified=qualified
            )
            for row in rows
        ]
    )
