"""Log-in with the site's directory (LDAP), through django-auth-ldap.

django-auth-ldap binds, finds the person and their groups; this backend then
hands what the directory said to identity.directory, which sets the roles (from
MEDBAY_LDAP_ROLE_GROUPS) and the Unix account (MEDBAY_LDAP_UNIX_USER_ATTR)
afresh at every log-in. Nothing is typed by hand and nothing is cached, so a
person taken out of a group loses the role the next time they log in.

Why a log-in was refused, when the directory knows it, is left on the request
(`request.medbay_login_problem`) for the log-in form to show:
- the directory cannot be reached (or fails): local accounts, which the next
  backend checks, still log in;
- the person is in a deny group (MEDBAY_LDAP_DENY_GROUPS): said only after their
  password was right, as Django says "inactive";
- identity.directory refuses the mapping (a researcher without a Unix account, root);
- the name is a local administrator's (staff or superuser with a password), which
  a directory account never takes over (as identity/oidc_login.py).
The last two are final (PermissionDenied ends Django's backend loop): a local
account of the same name must not let in someone the site keeps out.

The backend sits after axes' (settings.AUTHENTICATION_BACKENDS), so directory
log-ins are throttled like local ones.
"""

from __future__ import annotations

import contextvars
import logging

import ldap
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django_auth_ldap.backend import LDAPBackend, ldap_error

from identity.directory import (
    IdentityRefused,
    SiteIdentity,
    apply_site_identity,
    normalise_group,
    parse_role_map,
    roles_from_groups,
)

log = logging.getLogger(__name__)

UNREACHABLE = (
    "The site directory cannot be reached, so directory accounts cannot log in right now. "
    "Try again in a few minutes; local accounts still work."
)
DIRECTORY_FAILED = (
    "The site directory could not check this log-in (it answered with an error). "
    "Try again in a few minutes or tell your administrator; local accounts still work."
)
DISABLED = "This account is disabled in the site directory."

# What went wrong in the log-in now being checked (one per thread or task), and
# whether it is final: the directory knew the person and keeps them out.
_problem: contextvars.ContextVar[list[tuple[str, bool]] | None] = contextvars.ContextVar(
    "medbay_ldap_problem", default=None
)


def role_map():
    return parse_role_map(settings.MEDBAY_LDAP_ROLE_GROUPS, "MEDBAY_LDAP_ROLE_GROUPS")


def check_settings() -> None:
    """Fail at start-up, naming the variable, on a role map nobody could log in with."""
    if not settings.MEDBAY_LDAP_ROLE_GROUPS.strip():
        raise ImproperlyConfigured(
            "MEDBAY_LDAP_URI is set but MEDBAY_LDAP_ROLE_GROUPS is empty: nobody from the "
            "directory would have a role (e.g. researcher=cn=ml-users,ou=groups,dc=example,dc=org)"
        )
    role_map()


def _report(message: str, *, final: bool = False) -> None:
    problems = _problem.get()
    if problems is not None:
        problems.append((message, final))


def _on_ldap_error(sender, context, user, request, exception, **kwargs) -> None:
    # django-auth-ldap logs the error and refuses the log-in; say why on the page.
    if not (isinstance(sender, type) and issubclass(sender, DirectoryBackend)):
        return
    down = isinstance(exception, ldap.SERVER_DOWN | ldap.TIMEOUT | ldap.CONNECT_ERROR)
    log.warning(
        "site directory %s (%s): %r", "unreachable" if down else "error", context, exception
    )
    _report(UNREACHABLE if down else DIRECTORY_FAILED)


ldap_error.connect(_on_ldap_error, dispatch_uid="medbay-ldap-error")


def first(attrs, name: str) -> str:
    values = attrs.get(name) or () if attrs else ()
    return str(values[0]).strip() if values else ""


class DirectoryBackend(LDAPBackend):
    """django-auth-ldap's backend, mapped to Medbay's roles and Unix accounts."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        problems: list[tuple[str, bool]] = []
        token = _problem.set(problems)
        try:
            user = super().authenticate(request, username=username, password=password, **kwargs)
        finally:
            _problem.reset(token)
        if user is not None and not user.is_active:
            # Disabled in Medbay (`medbay_user disable`): the directory's yes does
            # not undo it, on the log-in page or at the API's token endpoint.
            problems.insert(0, ("This account is disabled in Medbay.", True))
            user = None
        if user is not None or not problems:
            return user
        message, final = problems[0]
        if request is not None:
            request.medbay_login_problem = message
        if final:
            # The password was right and the site keeps this person out: a local
            # account of the same name must not let them in after all.
            raise PermissionDenied(message)
        return None

    def get_or_build_user(self, username, ldap_user):
        # Called after the password was checked and before the user row is written.
        denied = {normalise_group(dn) for dn in settings.MEDBAY_LDAP_DENY_GROUPS}
        if denied & {normalise_group(dn) for dn in ldap_user.group_dns}:
            self._take_roles_away(username)
            _report(DISABLED, final=True)
            raise ldap_user.AuthenticationFailed("in a deny group (MEDBAY_LDAP_DENY_GROUPS)")
        user, built = super().get_or_build_user(username, ldap_user)
        if not built and (user.is_superuser or user.is_staff) and user.has_usable_password():
            # As for OIDC: someone the directory calls "admin" must not become the local
            # admin. Not final: the local account's own password is checked next.
            _report(
                f"A local Medbay administrator account named {user.get_username()!r} already "
                f"exists; it logs in with its own password, not the directory's."
            )
            raise ldap_user.AuthenticationFailed("a local administrator account of that name")
        return user, built

    def authenticate_ldap_user(self, ldap_user, password):
        user = super().authenticate_ldap_user(ldap_user, password)
        if user is None:
            return None
        try:
            apply_site_identity(user, self.identity(user, ldap_user))
        except IdentityRefused as refused:
            log.warning("directory log-in of %s refused: %s", user.get_username(), refused)
            _report(str(refused), final=True)
            return None
        return user

    def identity(self, user, ldap_user) -> SiteIdentity:
        attrs = ldap_user.attrs
        groups = tuple(sorted(ldap_user.group_dns))
        return SiteIdentity(
            source="ldap",
            username=user.get_username(),
            unix_user=first(attrs, settings.MEDBAY_LDAP_UNIX_USER_ATTR),
            roles=roles_from_groups(groups, role_map()),
            email=first(attrs, "mail"),
            first_name=first(attrs, "givenName"),
            last_name=first(attrs, "sn"),
            groups=groups,
        )

    def _take_roles_away(self, username: str) -> None:
        """A disabled person's sessions still open hold no role from now on."""
        from django.contrib.auth import get_user_model

        user = get_user_model().objects.filter(username__iexact=username).first()
        if user is not None:
            nobody = SiteIdentity(source="ldap", username=username, unix_user="", roles=frozenset())
            apply_site_identity(user, nobody)
