from django.apps import AppConfig


class ReportsConfig(AppConfig):
    """The managers' reports."""

    name = "reports"
    default_auto_field = "django.db.models.BigAutoField"
