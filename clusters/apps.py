from django.apps import AppConfig


class ClustersConfig(AppConfig):
    name = "clusters"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Registered here rather than when the engine is imported: ingestion runs
        # in the web process, which never imports the engine, and that is where
        # new incidents must turn into remediation runs.
        from clusters.remediation import policies

        policies.register()
