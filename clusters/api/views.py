from __future__ import annotations

from django.db.models import Prefetch
from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import exceptions, viewsets

from clusters.api.serializers import NodeSerializer
from clusters.models import Cluster, Node
from core.roles import HasAnyRole
from jobs.models import ACTIVE_JOB_STATES, Job

CLUSTER_PARAMETER = OpenApiParameter(
    "cluster", str, required=False, description="only this cluster's nodes (a name, or all)"
)


@extend_schema_view(
    list=extend_schema(parameters=[CLUSTER_PARAMETER]),
    retrieve=extend_schema(parameters=[CLUSTER_PARAMETER]),
)
class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    """Nodes with state, partitions, pool, GPUs and current jobs; `?cluster=` for one
    cluster's (a name that two clusters share must say which)."""

    serializer_class = NodeSerializer
    permission_classes = [HasAnyRole]
    lookup_field = "name"
    lookup_value_regex = r"[A-Za-z0-9._-]+"

    def get_queryset(self):
        active = Job.objects.filter(state__in=ACTIVE_JOB_STATES).only("slurm_id")
        nodes = (
            Node.objects.select_related("pool", "cluster")
            .prefetch_related("gpus", Prefetch("jobs", queryset=active, to_attr="active_jobs"))
            .order_by("name", "cluster__name")
        )
        cluster = self.request.query_params.get("cluster", "")
        if cluster in ("", "all"):
            return nodes
        if not Cluster.objects.filter(name=cluster[:64]).exists():
            raise exceptions.ValidationError({"cluster": [f"No cluster named {cluster[:64]!r}."]})
        return nodes.filter(cluster__name=cluster)

    def get_object(self):
        found = list(self.get_queryset().filter(name=self.kwargs["name"])[:10])
        if not found:
            raise Http404("No such node.")
        if len(found) > 1:
            names = ", ".join(node.cluster.name for node in found)
            raise exceptions.ValidationError(
                {"cluster": [f"Node {found[0].name} exists on {names}: say which, ?cluster=."]}
            )
        self.check_object_permissions(self.request, found[0])
        return found[0]
