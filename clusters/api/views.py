from __future__ import annotations

from django.db.models import Prefetch
from rest_framework import viewsets

from clusters.api.serializers import NodeSerializer
from clusters.models import Node
from core.roles import HasAnyRole
from jobs.models import ACTIVE_JOB_STATES, Job


class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    """Nodes with state, partitions, pool, GPUs and current jobs."""

    serializer_class = NodeSerializer
    permission_classes = [HasAnyRole]
    lookup_field = "name"
    lookup_value_regex = r"[A-Za-z0-9._-]+"

    def get_queryset(self):
        active = Job.objects.filter(state__in=ACTIVE_JOB_STATES).only("slurm_id")
        return (
            Node.objects.select_related("pool")
            .prefetch_related("gpus", Prefetch("jobs", queryset=active, to_attr="active_jobs"))
            .order_by("name")
        )
