"""Accounts without a directory: role groups, users and their roles, API tokens.

`manage.py medbay_user` and the tokens pages are thin over these functions.
Every change of a person's roles, active flag or Unix account writes an
AccountChange row; disabling someone also revokes their API tokens and closes
their open live sockets, so nothing they hold keeps working.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth import get_user_model, password_validation
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from core import live
from core.roles import Role
from identity.models import AccountChange, ApiToken

DEMO_USERS = (("alice", Role.RESEARCHER), ("admin", Role.ADMIN), ("manager", Role.MANAGER))
CLOSE_ACCOUNT_DISABLED = 4401  # what the page does on log-out: stop retrying, show "logged out"


class AccountError(Exception):
    """A request about an account that cannot be done as asked; the message says why."""


def ensure_role_groups() -> dict[Role, Group]:
    return {role: Group.objects.get_or_create(name=role.value)[0] for role in Role}


def parse_roles(names: Iterable[str]) -> frozenset[Role]:
    roles = set()
    for name in names:
        try:
            roles.add(Role(name.strip().lower()))
        except ValueError:
            known = ", ".join(role.value for role in Role)
            raise AccountError(f"Unknown role {name!r}; the roles are {known}.") from None
    if not roles:
        raise AccountError("Give at least one role.")
    return frozenset(roles)


def create_user_with_role(username: str, role: Role, password: str | None = None):
    """Create (or reset) a user in exactly one role; returns (user, password)."""
    groups = ensure_role_groups()
    password = password or secrets.token_urlsafe(9)
    user, _ = get_user_model().objects.get_or_create(username=username)
    user.set_password(password)
    user.is_staff = role == Role.ADMIN
    user.save()
    user.groups.set([groups[role]])
    return user, password


def create_demo_users() -> list[tuple[str, str, str]]:
    """Fresh passwords for the three demo users: (username, role, password)."""
    return [
        (username, role.value, create_user_with_role(username, role)[1])
        for username, role in DEMO_USERS
    ]


def get_user(username: str):
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise AccountError(f"No user named {username!r}.")
    return user


def _roles_text(roles: Iterable[Role]) -> str:
    return ",".join(sorted(role.value for role in roles))


def unix_user_refusal(username: str, unix_user: str) -> str | None:
    """Why a researcher must not be mapped to `unix_user`, or None."""
    from jobs.access import system_account_refusal
    from jobs.models import ResearcherProfile

    reason = system_account_refusal(unix_user)
    if reason:
        return reason
    taken = (
        ResearcherProfile.objects.filter(unix_user=unix_user)
        .exclude(user__username=username)
        .select_related("user")
        .first()
    )
    if taken is not None:
        # Two people on one Unix account would see and act on each other's jobs.
        return f"Unix account {unix_user!r} is already mapped to user {taken.user.username!r}."
    return None


def add_user(
    username: str,
    roles: Iterable[Role],
    *,
    by: str,
    unix_user: str = "",
    email: str = "",
    password: str | None = None,
) -> tuple[object, str]:
    """Create a user in `roles`; returns (user, password), the password generated if not given."""
    from jobs.models import ResearcherProfile

    User = get_user_model()
    roles = frozenset(roles)
    try:
        User.username_validator(username)
    except ValidationError as error:
        raise AccountError(f"{username!r} is not a valid user name: {error.messages[0]}") from None
    if User.objects.filter(username=username).exists():
        raise AccountError(f"User {username!r} already exists; use set-role to change roles.")
    if Role.RESEARCHER in roles:
        reason = unix_user_refusal(username, unix_user or username)
        if reason:
            raise AccountError(reason)
    password = password or secrets.token_urlsafe(12)
    candidate = User(username=username, email=email)
    try:
        password_validation.validate_password(password, candidate)
    except ValidationError as error:
        raise AccountError(" ".join(error.messages)) from None
    groups = ensure_role_groups()
    with transaction.atomic():
        user = User.objects.create_user(username=username, email=email, password=password)
        user.is_staff = Role.ADMIN in roles
        user.save(update_fields=["is_staff"])
        user.groups.set([groups[role] for role in roles])
        AccountChange.objects.create(
            user=user, field=AccountChange.Field.CREATED, new=_roles_text(roles), by=by
        )
        if unix_user:
            ResearcherProfile.objects.create(user=user, unix_user=unix_user)
            AccountChange.objects.create(
                user=user, field=AccountChange.Field.UNIX_USER, new=unix_user, by=by
            )
    return user, password


def set_roles(username: str, roles: Iterable[Role], *, by: str, unix_user: str | None = None):
    """Make the user's Medbay roles exactly `roles` (and optionally change their Unix account)."""
    from jobs.access import unix_user_for
    from jobs.models import ResearcherProfile

    user = get_user(username)
    roles = frozenset(roles)
    if Role.RESEARCHER in roles:
        reason = unix_user_refusal(username, unix_user or unix_user_for(user))
        if reason:
            raise AccountError(reason)
    groups = ensure_role_groups()
    old_unix = unix_user_for(user)
    with transaction.atomic():
        old = frozenset(role for role in Role if role.value in groups_of(user))
        wanted = {groups[role].pk for role in roles}
        role_pks = {group.pk for group in groups.values()}
        user.groups.remove(*[pk for pk in role_pks - wanted])
        user.groups.add(*wanted)
        user._medbay_roles = None
        if not user.is_superuser:
            get_user_model().objects.filter(pk=user.pk).update(is_staff=Role.ADMIN in roles)
        if old != roles:
            AccountChange.objects.create(
                user=user,
                field=AccountChange.Field.ROLES,
                old=_roles_text(old),
                new=_roles_text(roles),
                by=by,
            )
        if unix_user and unix_user != old_unix:
            ResearcherProfile.objects.update_or_create(user=user, defaults={"unix_user": unix_user})
            AccountChange.objects.create(
                user=user, field=AccountChange.Field.UNIX_USER, old=old_unix, new=unix_user, by=by
            )
    return user


def groups_of(user) -> set[str]:
    return set(user.groups.values_list("name", flat=True))


def disable_user(username: str, *, by: str, why: str = "") -> int:
    """The user can no longer log in; their API tokens are revoked and live sockets closed.

    Returns how many tokens were revoked. Disabling someone already disabled changes nothing.
    """
    User = get_user_model()
    user = get_user(username)
    now = timezone.now()
    with transaction.atomic():
        if not User.objects.filter(pk=user.pk, is_active=True).update(is_active=False):
            return 0
        AccountChange.objects.create(
            user=user, field=AccountChange.Field.ACTIVE, old="true", new="false", by=by, why=why
        )
        revoked = ApiToken.objects.filter(user=user, revoked_at__isnull=True).update(
            revoked_at=now, revoked_why=f"account disabled by {by}"[:200]
        )
        pk = user.pk
        # A session of a disabled user is already refused (Django checks is_active
        # on every request); open sockets would otherwise keep receiving.
        transaction.on_commit(
            lambda: live.close_sockets(live.user_group(pk), CLOSE_ACCOUNT_DISABLED)
        )
    return revoked


def enable_user(username: str, *, by: str, why: str = "") -> bool:
    """Let a disabled user log in again (their revoked tokens stay revoked)."""
    User = get_user_model()
    user = get_user(username)
    with transaction.atomic():
        if not User.objects.filter(pk=user.pk, is_active=False).update(is_active=True):
            return False
        AccountChange.objects.create(
            user=user, field=AccountChange.Field.ACTIVE, old="false", new="true", by=by, why=why
        )
    return True


@dataclass(frozen=True)
class AccountRow:
    username: str
    roles: str
    unix_user: str
    active: bool
    last_login: datetime | None


def list_accounts() -> list[AccountRow]:
    from jobs.models import ResearcherProfile

    User = get_user_model()
    role_names = {role.value for role in Role}
    profiles = dict(ResearcherProfile.objects.values_list("user_id", "unix_user"))
    rows = []
    for user in User.objects.order_by("username").prefetch_related("groups"):
        roles = {group.name for group in user.groups.all() if group.name in role_names}
        if user.is_superuser:
            roles.add(Role.ADMIN.value)
        rows.append(
            AccountRow(
                username=user.username,
                roles=",".join(sorted(roles)) or "-",
                unix_user=profiles.get(user.pk) or user.username,
                active=user.is_active,
                last_login=user.last_login,
            )
        )
    return rows


# API tokens.


def issue_api_token(user, name: str) -> tuple[ApiToken, str]:
    """A new token for `user`; the raw value is returned only here, never stored."""
    name = (name or "").strip()
    if not name:
        raise AccountError("Give the token a name, so that you can tell it from your others.")
    if len(name) > 100:
        raise AccountError("A token's name is at most 100 characters.")
    raw = ApiToken.new_raw()
    return ApiToken.store(user, name, raw), raw


def tokens_of(user):
    return ApiToken.objects.filter(user=user, revoked_at__isnull=True).order_by("-created_at")


def revoke_api_token(user, token_id: int, *, by=None) -> bool:
    """Revoke one of `user`'s own tokens; False if it is not theirs or already revoked."""
    return bool(
        ApiToken.objects.filter(pk=token_id, user=user, revoked_at__isnull=True).update(
            revoked_at=timezone.now(), revoked_by=by or user, revoked_why="revoked by its owner"
        )
    )
