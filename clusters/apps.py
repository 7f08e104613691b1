from importlib import import_module

from django.apps import AppConfig


class ClustersConfig(AppConfig):
    name = "clusters"
    default_auto_field = "django.db.models.BigAutoField"

    def import_models(self):
        # The remediation models belong to this app but live beside the engine;
        # Django imports only clusters.models, so they are imported here rather
        # than from the bottom of clusters/models.py (which made the two modules
        # import each other).
        super().import_models()
        import_module("clusters.remediation.models")

    def ready(self):
        # Registered here rather than when the engine is imported: ingestion runs
        # in the web process, which never imports the engine, and that is where
        # new incidents must turn into remediation runs.
        from clusters.remediation import clearing, policies

        policies.register()
        clearing.register()
