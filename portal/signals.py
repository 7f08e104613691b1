"""Open live sockets follow the account: logging out, a change of roles, a session
deleted, a password changed or the account disabled closes them.

Each socket also asks again by itself (portal.consumers): before it pushes a
rendering, and every minute, for what no signal tells (a session expired, an
account changed with a bulk update).
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_out
from django.contrib.sessions.models import Session
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_save
from django.dispatch import receiver
from django.utils import timezone

from core import live
from portal.consumers import CLOSE_FORBIDDEN as CLOSE_ACCESS_CHANGED
from portal.consumers import CLOSE_LOGGED_OUT

User = get_user_model()


@receiver(user_logged_out)
def close_the_sessions_sockets(sender, request, user, **kwargs) -> None:
    key = getattr(getattr(request, "session", None), "session_key", None)
    if key:
        live.close_sockets(live.session_group(key), CLOSE_LOGGED_OUT)


@receiver(m2m_changed, sender=User.groups.through)
def close_the_sockets_of_a_user_whose_roles_changed(sender, instance, action, **kwargs) -> None:
    if action not in ("post_add", "post_remove", "post_clear"):
        return
    # Roles are groups: from a user (instance is the user) or from a group.
    users = [instance.pk] if isinstance(instance, User) else kwargs.get("pk_set") or []
    for pk in users:
        transaction.on_commit(
            lambda pk=pk: live.close_sockets(live.user_group(pk), CLOSE_ACCESS_CHANGED)
        )


@receiver(pre_save, sender=User)
def note_whether_a_save_ends_sessions(sender, instance, update_fields=None, **kwargs) -> None:
    # A log-in saves only last_login: no query for it.
    if instance.pk is None or (update_fields and not {"password", "is_active"} & {*update_fields}):
        instance._medbay_ends_sessions = False
        return
    before = sender.objects.filter(pk=instance.pk).values_list("password", "is_active").first()
    instance._medbay_ends_sessions = before is not None and (
        before[0] != instance.password or (before[1] and not instance.is_active)
    )


@receiver(post_save, sender=User)
def recheck_the_sockets_of_a_user_whose_password_or_access_ended(sender, instance, **kwargs):
    """A new password ends every session made with the old one (Django's session hash;
    the changer's own goes on under a new key), a disabled account every session.
    Each socket asks whether its own session still holds: one opened since stays."""
    if getattr(instance, "_medbay_ends_sessions", False):
        instance._medbay_ends_sessions = False
        pk = instance.pk
        transaction.on_commit(lambda: live.recheck_sockets(live.user_group(pk)))


@receiver(post_delete, sender=Session)
def close_the_sockets_of_a_deleted_session(sender, instance, **kwargs) -> None:
    # A flush (log-out, a log-in as someone else, a session refused for its password)
    # deletes the row. Expired rows (clearsessions, thousands at once) cost no send:
    # their sockets find out within a minute by themselves.
    if instance.expire_date > timezone.now():
        key = instance.session_key
        transaction.on_commit(lambda: live.close_sockets(live.session_group(key), CLOSE_LOGGED_OUT))
