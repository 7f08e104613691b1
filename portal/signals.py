"""Open live sockets follow the account: logging out or a change of roles closes them."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import m2m_changed
from django.dispatch import receiver

from portal import live
from portal.consumers import CLOSE_FORBIDDEN as CLOSE_ACCESS_CHANGED
from portal.consumers import CLOSE_LOGGED_OUT


@receiver(user_logged_out)
def close_the_sessions_sockets(sender, request, user, **kwargs) -> None:
    key = getattr(getattr(request, "session", None), "session_key", None)
    if key:
        live.close_sockets(live.session_group(key), CLOSE_LOGGED_OUT)


@receiver(m2m_changed, sender=get_user_model().groups.through)
def close_the_sockets_of_a_user_whose_roles_changed(sender, instance, action, **kwargs) -> None:
    if action not in ("post_add", "post_remove", "post_clear"):
        return
    # Roles are groups: from a user (instance is the user) or from a group.
    users = [instance.pk] if isinstance(instance, get_user_model()) else kwargs.get("pk_set") or []
    for pk in users:
        transaction.on_commit(
            lambda pk=pk: live.close_sockets(live.user_group(pk), CLOSE_ACCESS_CHANGED)
        )
