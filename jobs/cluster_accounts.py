"""Which clusters a researcher may submit to, and as which Unix account on each.

The default cluster (the one jobs were always recorded under) keeps today's single
mapping, ResearcherProfile.unix_user or the portal username; any other cluster is
offered only where a ClusterAccount maps the person to an account there.
"""

from __future__ import annotations

from django.conf import settings

from clusters.models import Cluster
from jobs.access import unix_user_for
from jobs.models import ClusterAccount


def default_cluster() -> Cluster:
    """The cluster jobs go to when none is named: the first one, created on an empty table."""
    cluster = Cluster.objects.order_by("pk").first()
    if cluster is None:
        cluster = Cluster.objects.create(name="default", backend=settings.MEDBAY_BACKEND)
    return cluster


def submit_clusters(user) -> list[Cluster]:
    """The default cluster first, then each enabled cluster where USER has an account."""
    default = default_cluster()
    mapped = (
        Cluster.objects.filter(enabled=True, pk__in=_mapped_ids(user))
        .exclude(pk=default.pk)
        .order_by("name")
    )
    return [default, *mapped]


def unix_user_on(user, cluster: Cluster) -> str | None:
    """USER's Unix account on CLUSTER; None where they have none."""
    account = ClusterAccount.objects.filter(user=user, cluster=cluster).first()
    if account is not None:
        return account.unix_user
    if cluster.pk == default_cluster().pk:
        return unix_user_for(user)
    return None


def chosen_cluster(offered: list[Cluster], name: str | None) -> Cluster:
    """The offered cluster named NAME, else the default one (the form then says why)."""
    return next((cluster for cluster in offered if cluster.name == name), offered[0])


def _mapped_ids(user):
    return ClusterAccount.objects.filter(user=user).values_list("cluster_id", flat=True)
