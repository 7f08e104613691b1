from django.apps import AppConfig


class SyncConfig(AppConfig):
    """The Slurm sync loop and its command."""

    name = "sync"
    default_auto_field = "django.db.models.BigAutoField"
