from django.contrib import admin

from clusters.models import Cluster, Node, NodePool, Partition


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = [
        "name", "enabled", "from_environment", "transport", "fleet", "controller_up",
        "last_sync_at",
    ]  # fmt: skip


@admin.register(Partition)
class PartitionAdmin(admin.ModelAdmin):
    list_display = ["name", "cluster", "max_time_minutes", "max_nodes", "checkpoint_grace_s"]


@admin.register(NodePool)
class NodePoolAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "cluster"]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "status", "state", "flags", "reason", "pool"]
    list_filter = ["status", "pool"]
    search_fields = ["name"]
