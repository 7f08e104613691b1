"""The site directory's settings (MEDBAY_LDAP_*) as django-auth-ldap's AUTH_LDAP_* settings.

Read by portal/settings.py only when MEDBAY_LDAP_URI is set, so it imports no
model (django-auth-ldap's `config` module is safe in settings). Every mistake
is an ImproperlyConfigured naming the variable, at start-up, not at the first
log-in. The role map (MEDBAY_LDAP_ROLE_GROUPS) is checked when the apps are
ready (portal/ldap_login.check_settings), since Medbay's roles need them.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.core.exceptions import ImproperlyConfigured

INSTALL_HINT = (
    "MEDBAY_LDAP_URI is set but django-auth-ldap is not installed: "
    "pip install -e '.[ldap]' (python-ldap builds against libldap2-dev and libsasl2-dev)"
)
GROUP_TYPES = {
    # name in MEDBAY_LDAP_GROUP_TYPE: (django-auth-ldap class, default group filter)
    "groupOfNames": ("GroupOfNamesType", "(objectClass=groupOfNames)"),
    "groupOfUniqueNames": ("GroupOfUniqueNamesType", "(objectClass=groupOfUniqueNames)"),
    "posixGroup": ("PosixGroupType", "(objectClass=posixGroup)"),
}
DEFAULT_TIMEOUT_S = 5.0


def ldap_settings(environ: Mapping[str, str]) -> dict[str, object]:
    """AUTH_LDAP_* and MEDBAY_LDAP_* settings from the environment; {} when LDAP is off."""
    uri = _get(environ, "MEDBAY_LDAP_URI")
    if not uri:
        return {}
    try:
        import ldap
        from django_auth_ldap import config
    except ImportError:
        raise ImproperlyConfigured(INSTALL_HINT) from None
    if not uri.lower().startswith(("ldap://", "ldaps://", "ldapi://")):
        raise ImproperlyConfigured(
            f"MEDBAY_LDAP_URI must start with ldap://, ldaps:// or ldapi://, got {uri!r}"
        )
    timeout = _timeout(environ)
    values: dict[str, object] = {
        "AUTH_LDAP_SERVER_URI": uri,
        "AUTH_LDAP_START_TLS": _bool(environ, "MEDBAY_LDAP_START_TLS"),
        # A directory that does not answer must not hold the log-in page for long.
        "AUTH_LDAP_CONNECTION_OPTIONS": {
            ldap.OPT_NETWORK_TIMEOUT: timeout,
            ldap.OPT_TIMEOUT: timeout,
            ldap.OPT_REFERRALS: 0,
        },
        "AUTH_LDAP_BIND_DN": _get(environ, "MEDBAY_LDAP_BIND_DN"),
        "AUTH_LDAP_BIND_PASSWORD": environ.get("MEDBAY_LDAP_BIND_PASSWORD", ""),
        # Names, e-mail and roles come from identity.directory at every log-in, and
        # nothing is cached: a change in the directory counts at the next log-in.
        "AUTH_LDAP_USER_ATTR_MAP": {},
        "AUTH_LDAP_ALWAYS_UPDATE_USER": True,
        "AUTH_LDAP_CACHE_TIMEOUT": 0,
        "AUTH_LDAP_MIRROR_GROUPS": False,
        "AUTH_LDAP_FIND_GROUP_PERMS": False,
        "MEDBAY_LDAP_URI": uri,
        "MEDBAY_LDAP_ROLE_GROUPS": environ.get("MEDBAY_LDAP_ROLE_GROUPS", ""),
        "MEDBAY_LDAP_DENY_GROUPS": _dn_list(environ, "MEDBAY_LDAP_DENY_GROUPS"),
        "MEDBAY_LDAP_UNIX_USER_ATTR": _get(environ, "MEDBAY_LDAP_UNIX_USER_ATTR") or "uid",
    }
    values.update(_user_lookup(environ, ldap, config))
    values.update(_group_lookup(environ, ldap, config))
    return values


def _get(environ: Mapping[str, str], name: str) -> str:
    return environ.get(name, "").strip()


def _bool(environ: Mapping[str, str], name: str) -> bool:
    raw = _get(environ, name).lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false), got {raw!r}")


def _timeout(environ: Mapping[str, str]) -> float:
    raw = _get(environ, "MEDBAY_LDAP_TIMEOUT_S")
    try:
        value = float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        value = -1
    if value <= 0:
        raise ImproperlyConfigured(f"MEDBAY_LDAP_TIMEOUT_S must be a positive number, got {raw!r}")
    return value


def _dn_list(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    # DNs hold commas, so lists of them are split on ';' (as the role map is).
    return tuple(item.strip() for item in environ.get(name, "").split(";") if item.strip())


def _filter(environ: Mapping[str, str], name: str, default: str, *, needs_user: bool) -> str:
    text = _get(environ, name) or default
    if not (text.startswith("(") and text.endswith(")")):
        raise ImproperlyConfigured(f"{name} must be an LDAP filter in parentheses, got {text!r}")
    if needs_user and "%(user)s" not in text:
        raise ImproperlyConfigured(f"{name} must contain %(user)s, got {text!r}")
    return text


def _user_lookup(environ: Mapping[str, str], ldap, config) -> dict[str, object]:
    """Either a DN template (bind straight as the person) or a search (bind DN first)."""
    template = _get(environ, "MEDBAY_LDAP_USER_DN_TEMPLATE")
    base = _get(environ, "MEDBAY_LDAP_USER_SEARCH_BASE")
    if template and base:
        raise ImproperlyConfigured(
            "set MEDBAY_LDAP_USER_DN_TEMPLATE or MEDBAY_LDAP_USER_SEARCH_BASE, not both"
        )
    if template:
        if "%(user)s" not in template:
            raise ImproperlyConfigured(
                f"MEDBAY_LDAP_USER_DN_TEMPLATE must contain %(user)s, got {template!r}"
            )
        # Without a service account, the groups are searched as the person.
        return {
            "AUTH_LDAP_USER_DN_TEMPLATE": template,
            "AUTH_LDAP_BIND_AS_AUTHENTICATING_USER": True,
        }
    if not base:
        raise ImproperlyConfigured(
            "MEDBAY_LDAP_URI is set: set MEDBAY_LDAP_USER_SEARCH_BASE (with MEDBAY_LDAP_BIND_DN "
            "and MEDBAY_LDAP_BIND_PASSWORD) or MEDBAY_LDAP_USER_DN_TEMPLATE"
        )
    user_filter = _filter(environ, "MEDBAY_LDAP_USER_FILTER", "(uid=%(user)s)", needs_user=True)
    return {
        "AUTH_LDAP_USER_SEARCH": config.LDAPSearch(base, ldap.SCOPE_SUBTREE, user_filter),
        "AUTH_LDAP_BIND_AS_AUTHENTICATING_USER": False,
    }


def _group_lookup(environ: Mapping[str, str], ldap, config) -> dict[str, object]:
    base = _get(environ, "MEDBAY_LDAP_GROUP_SEARCH_BASE")
    if not base:
        raise ImproperlyConfigured(
            "MEDBAY_LDAP_URI is set: set MEDBAY_LDAP_GROUP_SEARCH_BASE (roles come from groups)"
        )
    kind = _get(environ, "MEDBAY_LDAP_GROUP_TYPE") or "groupOfNames"
    if kind not in GROUP_TYPES:
        raise ImproperlyConfigured(
            f"MEDBAY_LDAP_GROUP_TYPE must be one of {', '.join(GROUP_TYPES)}; got {kind!r}"
        )
    class_name, default_filter = GROUP_TYPES[kind]
    group_filter = _filter(environ, "MEDBAY_LDAP_GROUP_FILTER", default_filter, needs_user=False)
    return {
        "AUTH_LDAP_GROUP_SEARCH": config.LDAPSearch(base, ldap.SCOPE_SUBTREE, group_filter),
        "AUTH_LDAP_GROUP_TYPE": getattr(config, class_name)(),
        "MEDBAY_LDAP_GROUP_TYPE": kind,
    }
