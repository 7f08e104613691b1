"""What fleet changes tell open pages: board tiles and counts, node pages, the banner.

Called from `transaction.on_commit`, so a page never shows a change that was
rolled back; the sending itself is core.live's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from django.template.loader import render_to_string

from clusters.board import BoardFilter, board_rows, render_tiles
from clusters.canvas import delta as fleet_delta
from clusters.models import Cluster
from core import live

# The board's counts: a region of their own, since each board counts what its
# own filters show (clusters.views.board renders it).
COUNTS_REGION = "board-counts"
# The fleet view's table of nodes that are not healthy (clusters.canvas).
PROBLEMS_REGION = "fleet-problems"


def publish_nodes(node_ids: Iterable[int]) -> None:
    """Changed nodes: their board tiles (swapped in by id), the boards' counts, their
    node pages; inside a `live.one_trip`, once for every node changed in it."""
    node_ids = list(node_ids)
    if node_ids:
        live.gather(_publish_nodes_now, node_ids)


def _publish_nodes_now(node_ids: list[int]) -> None:
    rows, gpus = board_rows(BoardFilter(), node_ids=node_ids)
    live.send_html(live.BOARD_GROUP, render_tiles(rows, gpus, oob=True))
    live.poke(live.BOARD_GROUP, [COUNTS_REGION])
    # Fleet pages get the changed nodes' GPU letters, painted in place (static/js/fleet.js).
    live.send_html(live.FLEET_GROUP, json.dumps(fleet_delta(rows, gpus), separators=(",", ":")))
    live.poke(live.FLEET_GROUP, [COUNTS_REGION, PROBLEMS_REGION])
    live.poke_node_pages(row["name"] for row in rows)


def publish_banner(cluster_id: int) -> None:
    """The board's banner (Slurm unreachable, partitions edited outside Medbay)."""
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    html = render_to_string("clusters/partials/banner.html", {"cluster": cluster, "oob": True})
    live.send_html(live.BOARD_GROUP, html)
