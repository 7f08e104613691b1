"""How a person from the site's directory (LDAP) or identity provider (OIDC) becomes a Medbay user.

Both log-in paths end here with what the site said about the person: a user
name, the Unix account Slurm runs their jobs as, and the site groups they are
in. Roles come only from those groups, mapped by settings, and are set afresh
at every log-in, so someone taken out of a group loses the role the next time
they log in; the Unix account is written to their ResearcherProfile, so nobody
types it by hand.

Role maps are written `role=group;role=group`, one entry per `;` or line, a
role may appear several times (any of its groups grants it). Groups are LDAP
DNs (`cn=ml-users,ou=groups,dc=example,dc=org`: commas belong to the DN, which
is why entries are split on `;`) or OIDC group claim values; both are compared
without regard to case, as LDAP compares DNs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.contrib.auth.models import Group
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from core.roles import Role
from identity.accounts import ensure_role_groups
from jobs.access import system_account_refusal

log = logging.getLogger(__name__)

RoleMap = dict[Role, frozenset[str]]


class IdentityRefused(Exception):
    """The site vouched for this person, but Medbay must not let them in as mapped."""


def parse_role_map(text: str, setting: str = "role map") -> RoleMap:
    """`researcher=cn=ml-users,ou=groups,dc=x;admin=hpc-admins` → {Role: {groups}}."""
    mapping: dict[Role, set[str]] = {}
    for raw in text.replace("\n", ";").split(";"):
        entry = raw.strip()
        if not entry:
            continue
        role_name, sep, group = entry.partition("=")
        try:
            role = Role(role_name.strip().lower())
        except ValueError:
            known = ", ".join(role.value for role in Role)
            raise ImproperlyConfigured(
                f"{setting}: {role_name.strip()!r} is not a Medbay role (one of {known})"
            ) from None
        if not sep or not group.strip():
            raise ImproperlyConfigured(f"{setting}: {entry!r} names no group after '='")
        mapping.setdefault(role, set()).add(normalise_group(group))
    return {role: frozenset(groups) for role, groups in mapping.items()}


def normalise_group(group: str) -> str:
    # LDAP compares DNs without case and ignores spaces around the commas.
    return ",".join(part.strip() for part in group.strip().lower().split(","))


def roles_from_groups(groups: Iterable[str], role_map: RoleMap) -> frozenset[Role]:
    held = {normalise_group(group) for group in groups}
    return frozenset(role for role, wanted in role_map.items() if held & wanted)


@dataclass(frozen=True)
class SiteIdentity:
    """What the directory or identity provider said about one person at log-in."""

    source: str  # "ldap" or "oidc": says in logs and messages where it came from
    username: str
    unix_user: str
    roles: frozenset[Role]
    email: str = ""
    first_name: str = ""
    last_name: str = ""
    groups: tuple[str, ...] = field(default=())


def refusal(identity: SiteIdentity) -> str | None:
    """Why this identity must not become a Medbay user as mapped, or None."""
    if not identity.username:
        return f"The {identity.source} account has no user name."
    if Role.RESEARCHER in identity.roles:
        if not identity.unix_user:
            return (
                f"The {identity.source} account {identity.username!r} has no Unix account "
                f"to run jobs as."
            )
        reason = system_account_refusal(identity.unix_user)
        if reason:
            return reason
    return None


def apply_site_identity(user, identity: SiteIdentity) -> None:
    """Make `user`'s roles, staff flag and Unix account exactly what the site says now.

    Groups that are not Medbay roles are left alone (an admin may use them);
    the role groups are replaced, so a role the site no longer grants is gone.
    Raises IdentityRefused (and changes nothing) for a mapping Medbay refuses.
    """
    from jobs.models import ResearcherProfile

    reason = refusal(identity)
    if reason:
        raise IdentityRefused(reason)
    role_groups = ensure_role_groups()
    wanted = {role_groups[role].pk for role in identity.roles}
    with transaction.atomic():
        for attribute in ("email", "first_name", "last_name"):
            value = getattr(identity, attribute)
            if value:
                setattr(user, attribute, value)
        # Staff (the admin site) follows the admin role, except for a local superuser.
        user.is_staff = user.is_superuser or Role.ADMIN in identity.roles
        user.save()
        current = set(
            user.groups.filter(name__in=[role.value for role in Role]).values_list("pk", flat=True)
        )
        if current - wanted:
            user.groups.remove(*Group.objects.filter(pk__in=current - wanted))
        if wanted - current:
            user.groups.add(*Group.objects.filter(pk__in=wanted - current))
        if identity.unix_user:
            ResearcherProfile.objects.update_or_create(
                user=user, defaults={"unix_user": identity.unix_user}
            )
    user._medbay_roles = None  # roles_of() caches per object
    if current != wanted:
        log.info(
            "%s log-in of %s: roles now %s",
            identity.source,
            identity.username,
            sorted(role.value for role in identity.roles) or "none",
        )
