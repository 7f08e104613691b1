"""Node agents' tokens: issue (rotating the node's old ones), list, revoke.

`manage.py node_token` and the admins' agent tokens page both come here.
"""

from __future__ import annotations

from django.db.models import Prefetch
from django.utils import timezone

from clusters.models import Cluster, Node
from health.models import NodeToken


class NodeTokenError(Exception):
    """The request names no node or token that can be acted on; the message says why."""


def issue_node_token(node_name: str, *, cluster: str = "", by=None) -> tuple[NodeToken, str]:
    """A new token for the node of CLUSTER, revoking its old ones; the raw value is
    returned only here. CLUSTER may be left out while the name is in one cluster only."""
    return NodeToken.issue(token_node(node_name, cluster), created_by=by)


def token_node(node_name: str, cluster: str = "") -> Node:
    """The one node a token is for; NodeTokenError saying which cluster to name."""
    nodes = Node.objects.filter(name=node_name).select_related("cluster")
    if cluster:
        if not Cluster.objects.filter(name=cluster).exists():
            raise NodeTokenError(f"Unknown cluster {cluster!r}.")
        nodes = nodes.filter(cluster__name=cluster)
    found = list(nodes.order_by("cluster__name")[:10])
    if not found:
        where = f" in cluster {cluster}" if cluster else ""
        raise NodeTokenError(f"Unknown node {node_name!r}{where}; run a sync first.")
    if len(found) > 1:
        names = ", ".join(node.cluster.name for node in found)
        raise NodeTokenError(
            f"Node {node_name} is in several clusters ({names}): name its cluster, "
            "since a token belongs to a node of one cluster."
        )
    return found[0]


def revoke_node_token(token_id: int) -> NodeToken:
    token = NodeToken.objects.select_related("node").filter(pk=token_id).first()
    if token is None:
        raise NodeTokenError("No such agent token.")
    if not NodeToken.objects.filter(pk=token_id, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    ):
        raise NodeTokenError(f"The token {token.prefix}… of {token.node.name} was already revoked.")
    return token


def nodes_with_live_tokens():
    """Every node, with its unrevoked tokens (one query for the nodes, one for the tokens)."""
    live = NodeToken.objects.filter(revoked_at__isnull=True).select_related("created_by")
    return (
        Node.objects.order_by("name", "cluster__name")
        .select_related("cluster")
        .prefetch_related(
            Prefetch("agent_tokens", queryset=live.order_by("-created_at"), to_attr="live_tokens")
        )
    )
