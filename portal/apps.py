from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from clusters.backends import slurm_cli
        from portal import signals  # noqa: F401 (connects the receivers)
        from portal.metrics.slurm_commands import record_slurm_command

        # Every process that runs Slurm commands (web, slurm_sync, run_engine)
        # counts them where /metrics can read them.
        slurm_cli.add_command_observer(record_slurm_command)
