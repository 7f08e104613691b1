from django.apps import AppConfig
from django.conf import settings


class IdentityConfig(AppConfig):
    """Log-in, roles and tokens; its models keep the portal app's label (identity/models.py)."""

    name = "identity"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        if settings.MEDBAY_LDAP_URI:
            from identity import ldap_login

            ldap_login.check_settings()
        if settings.MEDBAY_OIDC_ENABLED:
            from identity import oidc_login

            # A role map naming no role or no group stops start-up, as LDAP's does,
            # instead of failing at the first person's log-in.
            oidc_login.role_map()
