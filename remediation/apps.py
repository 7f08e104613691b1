from django.apps import AppConfig


class RemediationConfig(AppConfig):
    """The engine's package; its models keep the clusters app's label (remediation/models.py)."""

    name = "remediation"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Registered here rather than when the engine is imported: ingestion runs
        # in the web process, which never imports the engine, and that is where
        # new incidents must turn into remediation runs.
        from remediation import admission, clearing, slurm_requests

        admission.register()
        clearing.register()
        slurm_requests.register()
