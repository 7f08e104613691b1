"""Which cluster a person's pages show: one they chose, remembered, or all of them.

A page's address may name the cluster (`?cluster=lab`, `?cluster=all`); without it
the page shows the cluster the person last chose in the header's switcher. Lists
put the cluster they show into the addresses their regions are fetched from, so a
region rendered once for everyone (portal.regions.shared_region) is kept per
cluster, never shown to a person looking at another one.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.http import Http404
from django.utils import timezone

from clusters.models import Cluster
from identity.models import ClusterChoice

ALL_CLUSTERS = "all"
_CACHED = "_medbay_viewed_cluster"


def enabled_clusters() -> list[Cluster]:
    return list(Cluster.objects.filter(enabled=True).order_by("name"))


def remembered_cluster(user) -> Cluster | None:
    """The enabled cluster USER last chose; None for all clusters (also when the one
    chosen has been disabled since)."""
    if not user.is_authenticated:
        return None
    choice = (
        ClusterChoice.objects.filter(user=user, cluster__enabled=True)
        .select_related("cluster")
        .first()
    )
    return choice.cluster if choice else None


def cluster_named(name: str) -> Cluster | None:
    """The cluster NAME ("all" for all of them: None); Http404 for one Medbay does not watch."""
    if name == ALL_CLUSTERS:
        return None
    cluster = Cluster.objects.filter(name=name[:64]).first()
    if cluster is None:
        raise Http404(f"No cluster named {name[:64]!r}.")
    return cluster


def viewed_cluster(request) -> Cluster | None:
    """The cluster this request's page shows: the address's, else the remembered one;
    None for all clusters. Asked once per request."""
    kept = request.__dict__
    if _CACHED not in kept:
        named = request.GET.get("cluster", "")
        kept[_CACHED] = cluster_named(named) if named else remembered_cluster(request.user)
    return kept[_CACHED]


def viewed_name(request) -> str:
    """What the page's own addresses carry as `cluster=`: a name, or "all"."""
    cluster = viewed_cluster(request)
    return cluster.name if cluster else ALL_CLUSTERS


def choose_cluster(user, name: str) -> Cluster | None:
    """Remember that USER looks at cluster NAME (or "all"); ValueError for a cluster
    that is not enabled, said in words."""
    cluster = None
    if name != ALL_CLUSTERS:
        cluster = Cluster.objects.filter(name=name[:64], enabled=True).first()
        if cluster is None:
            raise ValueError(f"No enabled cluster is named {name[:64]!r}.")
    ClusterChoice.objects.update_or_create(
        user=user, defaults={"cluster": cluster, "chosen_at": timezone.now()}
    )
    return cluster


def switcher(request) -> dict:
    """Template context for the header's switcher (a context processor): the enabled
    clusters and the one shown. With one cluster or none it shows no choice."""
    if not request.user.is_authenticated:
        return {}
    clusters = enabled_clusters()
    try:
        shown = viewed_cluster(request)
    except Http404:  # the page itself says the cluster is unknown
        shown = None
    return {
        "switcher_clusters": clusters,
        "switcher_shown": shown,
        # What the page's live socket adds to its topics (portal.consumers): ":lab".
        "cluster_topic": f":{shown.name}" if shown else "",
        "cluster_param": shown.name if shown else ALL_CLUSTERS,
        # The page shows several clusters: rows name theirs, as two may share a node name.
        "clusters_several_shown": shown is None and len(clusters) > 1,
        # What a region's own address adds, so that it is fetched for the cluster its
        # page shows: "?cluster=lab"; "" where the page shows the remembered choice of
        # all clusters (as partials/cluster_input.html).
        "cluster_query": (
            "?" + urlencode({"cluster": shown.name if shown else ALL_CLUSTERS})
            if shown or request.GET.get("cluster")
            else ""
        ),
    }
