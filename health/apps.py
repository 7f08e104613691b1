from django.apps import AppConfig


class HealthConfig(AppConfig):
    name = "health"
    default_auto_field = "django.db.models.BigAutoField"
