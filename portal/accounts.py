"""Role groups and the demo's users."""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from portal.roles import Role

DEMO_USERS = (("alice", Role.RESEARCHER), ("admin", Role.ADMIN), ("manager", Role.MANAGER))


def ensure_role_groups() -> dict[Role, Group]:
    return {role: Group.objects.get_or_create(name=role.value)[0] for role in Role}


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
