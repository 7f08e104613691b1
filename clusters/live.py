"""What fleet changes tell open pages: board tiles and counts, node pages, the banner.

Called from `transaction.on_commit`, so a page never shows a change that was
rolled back; the sending itself is core.live's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from django.template.loader import render_to_string

from clusters.board import BoardFilter, banner_context, board_rows, render_tiles, tiles_qualified
from clusters.canvas import delta as fleet_delta
from clusters.models import Cluster
from core import live

# The board's counts: a region of their own, since each board counts what its
# own filters show (clusters.views.board renders it).
COUNTS_REGION = "board-counts"
# The fleet view's table of nodes that are not healthy (clusters.canvas).
PROBLEMS_REGION = "fleet-problems"
# The all-clusters overview's cards (portal.overview): each cluster's nodes and sync.
OVERVIEW_REGION = "cluster-overview"


def publish_nodes(node_ids: Iterable[int]) -> None:
    """Changed nodes: their board tiles (swapped in by id), the boards' counts, their
    node pages; inside a `live.one_trip`, once for every node changed in it."""
    node_ids = list(node_ids)
    if node_ids:
        live.gather(_publish_nodes_now, node_ids)


def _publish_nodes_now(node_ids: list[int]) -> None:
    rows, gpus = board_rows(BoardFilter(), node_ids=node_ids)
    by_cluster: dict[int, list[dict]] = {}
    for row in rows:
        by_cluster.setdefault(row["cluster_id"], []).append(row)
    # A board of all clusters names its tiles by cluster too where two may share a name.
    several = tiles_qualified()
    for cluster_id, changed in by_cluster.items():
        _publish_to(live.cluster_group, cluster_id, changed, gpus, qualified=False)
        live.poke_node_pages((row["name"] for row in changed), cluster_id)
    _publish_to(lambda group, _: group, None, rows, gpus, qualified=several)
    live.poke(live.CLUSTERS_GROUP, [OVERVIEW_REGION])


def _publish_to(group_of, cluster_id, rows: list[dict], gpus, *, qualified: bool) -> None:
    """The tiles, counts and fleet letters of ROWS, to the boards of one cluster (or, with
    group_of returning the group as it is, to those of all clusters)."""
    board, fleet = group_of(live.BOARD_GROUP, cluster_id), group_of(live.FLEET_GROUP, cluster_id)
    live.send_html(board, render_tiles(rows, gpus, oob=True, qualified=qualified))
    live.poke(board, [COUNTS_REGION])
    # Fleet pages get the changed nodes' GPU letters, painted in place (static/js/fleet.js).
    live.send_html(fleet, json.dumps(fleet_delta(rows, gpus), separators=(",", ":")))
    live.poke(fleet, [COUNTS_REGION, PROBLEMS_REGION])


def publish_banner(cluster_id: int) -> None:
    """The board's banner (Slurm unreachable, partitions edited outside Medbay): the
    cluster's own to its boards, and the one of every cluster to the boards of all."""
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None:
        return
    for shown, group in ((cluster, live.cluster_group), (None, lambda name, _: name)):
        context = {**banner_context(shown), "oob": True}
        html = render_to_string("clusters/partials/banner.html", context)
        for page in (live.BOARD_GROUP, live.FLEET_GROUP):
            live.send_html(group(page, cluster_id), html)
    # The overview says each cluster's sync in words: its card changes too.
    live.poke(live.CLUSTERS_GROUP, [OVERVIEW_REGION])
