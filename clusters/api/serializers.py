from __future__ import annotations

from rest_framework import serializers

from clusters.addresses import node_url
from clusters.models import Gpu, Node


class GpuSerializer(serializers.ModelSerializer):
    class Meta:
        model = Gpu
        fields = ["index", "uuid", "model", "pci_bus_id", "health", "health_reason"]


class NodeSerializer(serializers.ModelSerializer):
    cluster = serializers.CharField(source="cluster.name", read_only=True)
    url = serializers.SerializerMethodField(help_text="the node's page in the portal")
    partitions = serializers.SerializerMethodField()
    flags = serializers.SerializerMethodField()
    pool = serializers.SerializerMethodField()
    gpus = GpuSerializer(many=True, read_only=True)
    jobs = serializers.SerializerMethodField()

    class Meta:
        model = Node
        fields = [
            "name",
            "cluster",
            "url",
            "state",
            "flags",
            "status",
            "reason",
            "partitions",
            "pool",
            "cpus",
            "memory_mb",
            "gpu_count",
            "gpus_used",
            "last_seen_at",
            "gpus",
            "jobs",
        ]

    def get_url(self, node: Node) -> str:
        return node_url(node.cluster.name, node.name)

    def get_partitions(self, node: Node) -> list[str]:
        return [name for name in node.partition_names.split(",") if name]

    def get_flags(self, node: Node) -> list[str]:
        return sorted(node.flag_set)

    def get_pool(self, node: Node) -> str | None:
        return node.pool.kind if node.pool else None

    def get_jobs(self, node: Node) -> list[int]:
        return [job.slurm_id for job in node.active_jobs]
