"""The three roles and how every page, API view and consumer checks them.

Roles are Django groups so admins manage them in the admin site; a superuser
counts as an admin.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from rest_framework.permissions import BasePermission


class Role(StrEnum):
    RESEARCHER = "researcher"
    ADMIN = "admin"
    MANAGER = "manager"


def roles_of(user) -> set[Role]:
    if not getattr(user, "is_authenticated", False):
        return set()
    cached = getattr(user, "_medbay_roles", None)
    if cached is not None:
        return cached
    names = set(user.groups.values_list("name", flat=True))
    roles = {role for role in Role if role.value in names}
    if user.is_superuser:
        roles.add(Role.ADMIN)
    user._medbay_roles = roles
    return roles


def has_role(user, *roles: Role) -> bool:
    return bool(roles_of(user) & set(roles))


def is_admin(user) -> bool:
    return has_role(user, Role.ADMIN)


def role_required(*roles: Role) -> Callable:
    """Login required, then one of `roles`; anything else is a 403."""

    def decorator(view):
        @login_required
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            if not has_role(request.user, *roles):
                raise PermissionDenied("Your role does not allow this page.")
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


ANY_ROLE = (Role.RESEARCHER, Role.ADMIN, Role.MANAGER)


class HasAnyRole(BasePermission):
    """Authenticated and holding at least one Medbay role."""

    message = "Your account has no Medbay role."

    def has_permission(self, request, view) -> bool:
        return has_role(request.user, *ANY_ROLE)


class IsMedbayAdmin(BasePermission):
    message = "Only admins may do this."

    def has_permission(self, request, view) -> bool:
        return is_admin(request.user)


def role_context(request) -> dict:
    roles = roles_of(request.user)
    return {
        "is_admin": Role.ADMIN in roles,
        "is_manager": Role.MANAGER in roles,
        "is_researcher": Role.RESEARCHER in roles,
    }
