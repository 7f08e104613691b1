"""Admins' agent tokens page: issue a node's token (shown once), list and revoke them."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from core.roles import Role, role_required
from health.node_tokens import NodeTokenError, issue_node_token, nodes_with_live_tokens
from health.node_tokens import revoke_node_token as revoke


class IssueForm(forms.Form):
    # "NODE", or "CLUSTER/NODE" where the page lists several clusters' nodes.
    node = forms.CharField(max_length=130, error_messages={"required": "Choose a node."})

    def node_and_cluster(self) -> tuple[str, str]:
        cluster, _, node = self.cleaned_data["node"].rpartition("/")
        return node, cluster


@never_cache  # the answer to an issue holds the whole token
@require_http_methods(["GET", "POST"])
@role_required(Role.ADMIN)
def agent_tokens(request):
    form = IssueForm(request.POST if request.method == "POST" else None)
    issued, raw, status = None, None, 200
    if form.is_valid():
        try:
            node, cluster = form.node_and_cluster()
            issued, raw = issue_node_token(node, cluster=cluster, by=request.user)
        except NodeTokenError as error:
            form.add_error("node", str(error))
    if form.errors:
        status = 400
    nodes = list(nodes_with_live_tokens())
    context = {
        "form": form,
        "nodes": nodes,
        "several_clusters": len({node.cluster_id for node in nodes}) > 1,
        "any_tokens": any(node.live_tokens for node in nodes),
        "issued": issued,
        "raw": raw,
        "portal_url": request.build_absolute_uri("/").rstrip("/"),
    }
    return render(request, "health/agent_tokens.html", context, status=status)


@require_POST
@role_required(Role.ADMIN)
def agent_token_revoke(request, token_id: int):
    try:
        token = revoke(token_id)
    except NodeTokenError as error:
        messages.error(request, str(error))
    else:
        messages.success(
            request, f"Revoked {token.node.name}'s token {token.prefix}…: its agent is refused now."
        )
    return redirect("agent-tokens")
