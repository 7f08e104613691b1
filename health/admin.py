from django.contrib import admin

from health.models import HealthEvent, Incident, NodeToken


@admin.register(NodeToken)
class NodeTokenAdmin(admin.ModelAdmin):
    list_display = ["node", "prefix", "created_at", "revoked_at", "last_used_at"]
    readonly_fields = ["token_hash", "prefix", "created_at", "last_used_at"]


@admin.register(HealthEvent)
class HealthEventAdmin(admin.ModelAdmin):
    list_display = ["node", "kind", "xid", "check_name", "severity", "count", "last_observed_at"]
    list_filter = ["kind", "severity"]


@admin.register(Incident)
class IncidentAdmin(admin.ModelAdmin):
    list_display = ["node", "gpu_index", "severity", "xids", "event_count", "last_event_at"]
