from django.apps import AppConfig


class DemoConfig(AppConfig):
    """The demo: the simulator's cluster, its synthetic past and `manage.py demo`."""

    name = "demo"
    default_auto_field = "django.db.models.BigAutoField"
