"""Node agents' tokens: issue (rotating the node's old ones), list, revoke.

`manage.py node_token` and the admins' agent tokens page both come here.
"""

from __future__ import annotations

from django.db.models import Prefetch
from django.utils import timezone

from clusters.models import Node
from health.models import NodeToken


class NodeTokenError(Exception):
    """The request names no node or token that can be acted on; the message says why."""


def issue_node_token(node_name: str, *, by=None) -> tuple[NodeToken, str]:
    """A new token for the node, revoking its old ones; the raw value is returned only here."""
    node = Node.objects.filter(name=node_name).first()
    if node is None:
        raise NodeTokenError(f"Unknown node {node_name!r}; run a sync first.")
    return NodeToken.issue(node, created_by=by)


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
    return Node.objects.order_by("name").prefetch_related(
        Prefetch("agent_tokens", queryset=live.order_by("-created_at"), to_attr="live_tokens")
    )
