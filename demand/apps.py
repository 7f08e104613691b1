from django.apps import AppConfig


class DemandConfig(AppConfig):
    """Training and inference follow demand: signals, reallocation policies, decisions."""

    name = "demand"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # The Slurm sync samples the demand signals after each snapshot it applies (the
        # demo's simulation loop calls the same tick itself).
        from demand import periodic

        periodic.register()
