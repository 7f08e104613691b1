"""Accounts without a directory: people's API tokens and the history of their accounts."""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone

# The identity tables were created by the portal app (portal/migrations) and keep its
# label, so moving identity to its own package renamed no table.
APP_LABEL = "portal"

API_TOKEN_PREFIX = "mbu_"


def hash_api_token(raw: str) -> str:
    # Tokens are 256 random bits, so a plain digest is enough (no salt, no stretching)
    # and lets a request find its row by an indexed equality.
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiToken(models.Model):
    """A person's API token, stored hashed: after creation only its prefix is ever shown."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    token_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    revoked_why = models.CharField(max_length=200, blank=True)

    class Meta:
        app_label = APP_LABEL
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.user} API token {self.prefix}…"

    @staticmethod
    def new_raw() -> str:
        return f"{API_TOKEN_PREFIX}{secrets.token_urlsafe(32)}"

    @classmethod
    def store(cls, user, name: str, raw: str, **fields) -> ApiToken:
        return cls.objects.create(
            user=user,
            name=name,
            token_hash=hash_api_token(raw),
            prefix=raw[: len(API_TOKEN_PREFIX) + 8],
            **fields,
        )


class AccountChange(models.Model):
    """Append-only: who changed whose account (roles, active, Unix account), from what, to what."""

    class Field(models.TextChoices):
        CREATED = "created"
        ROLES = "roles"
        ACTIVE = "active"
        UNIX_USER = "unix_user"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="account_changes"
    )
    field = models.CharField(max_length=16, choices=Field.choices)
    old = models.CharField(max_length=200, blank=True)
    new = models.CharField(max_length=200, blank=True)
    by = models.CharField(max_length=150, help_text="who or what made the change")
    why = models.CharField(max_length=200, blank=True)
    at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        app_label = APP_LABEL
        ordering = ["at", "pk"]

    def __str__(self) -> str:
        return f"{self.user} {self.field}: {self.old!r} → {self.new!r} by {self.by}"


class ClusterChoice(models.Model):
    """The cluster a person last chose to look at; none (or no row) means all clusters."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="cluster_choice"
    )
    # SET_NULL: a cluster removed from the table leaves its viewers on all clusters.
    cluster = models.ForeignKey(
        "clusters.Cluster", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    chosen_at = models.DateTimeField(default=timezone.now)

    class Meta:
        app_label = APP_LABEL

    def __str__(self) -> str:
        return f"{self.user} views {self.cluster or 'all clusters'}"
