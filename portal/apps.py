from django.apps import AppConfig
from django.conf import settings


class PortalConfig(AppConfig):
    name = "portal"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from clusters.backends import slurm_cli
        from portal import metrics, signals  # noqa: F401 (connects the receivers)

        # Every process that runs Slurm commands (web, slurm_sync, run_engine)
        # counts them where /metrics can read them.
        slurm_cli.add_command_observer(metrics.record_slurm_command)
        if settings.MEDBAY_LDAP_URI:
            from portal import ldap_login

            ldap_login.check_settings()
        if settings.MEDBAY_OIDC_ENABLED:
            from portal import oidc_login

            # A role map naming no role or no group stops start-up, as LDAP's does,
            # instead of failing at the first person's log-in.
            oidc_login.role_map()
