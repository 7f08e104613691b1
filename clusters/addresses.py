"""Node addresses: `/nodes/<cluster>/<name>/`, and what the old `/nodes/<name>/` means.

Two clusters may each have a gpu-01. An address by name alone is kept for links and
bookmarks made before clusters had addresses: where the name is one node's, it leads
there; where several clusters have it, the page asks which (never the first found).
"""

from __future__ import annotations

from functools import wraps

from django.http import Http404
from django.shortcuts import render
from django.urls import reverse

from clusters.models import Node


class SeveralClusters(Exception):
    """An address by name alone that fits a thing on more than one cluster."""

    def __init__(self, what: str, old: str, choices: list[tuple[str, str]]) -> None:
        # OLD: the address by name alone; CHOICES: (cluster name, the address there)
        self.what, self.old, self.choices = what, old, choices
        super().__init__(", ".join(cluster for cluster, _ in choices))


def asks_which_cluster(view):
    """VIEW, where an address by name alone fits several clusters, answers with a page
    that links the same page on each (a POST does nothing, and is answered 409)."""

    @wraps(view)
    def wrapped(request, *args, **kwargs):
        try:
            return view(request, *args, **kwargs)
        except SeveralClusters as several:
            rest = request.path[len(several.old) :] if request.path.startswith(several.old) else ""
            query = request.META.get("QUERY_STRING", "")
            choices = [
                (cluster, url + rest + (f"?{query}" if query else ""))
                for cluster, url in several.choices
            ]
            status = 200 if request.method in ("GET", "HEAD") else 409
            context = {"what": several.what, "choices": choices}
            return render(request, "clusters/choose_cluster.html", context, status=status)

    return wrapped


def node_url(cluster_name: str, name: str) -> str:
    return reverse("cluster-node", args=[cluster_name, name])


def node_at(nodes, cluster_name: str, name: str) -> Node:
    """The node NAME of cluster CLUSTER_NAME among NODES (a queryset), or 404."""
    node = nodes.filter(cluster__name=cluster_name, name=name).first()
    if node is None:
        raise Http404(f"No node {name} on cluster {cluster_name}.")
    return node


def node_named(nodes, name: str) -> Node:
    """The one node called NAME among NODES; 404 if none, SeveralClusters if more."""
    found = list(nodes.filter(name=name).order_by("cluster__name")[:50])
    if not found:
        raise Http404(f"No node {name}.")
    if len(found) > 1:
        choices = [(n.cluster.name, node_url(n.cluster.name, n.name)) for n in found]
        raise SeveralClusters(f"Node {name}", reverse("node-detail", args=[name]), choices)
    return found[0]
