"""People's API tokens on the API: `Authorization: Token <token>`, looked up by hash.

The header is DRF's own (`Token`), so clients written against
`POST /api/v1/auth/token/` keep working; the difference is that only a digest
is stored, a person may hold several, revoke each, and see when it was last used.
"""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from rest_framework import authentication, exceptions

from identity.models import ApiToken, hash_api_token

LAST_USED_PRECISION = timedelta(minutes=1)


class ApiTokenAuthentication(authentication.TokenAuthentication):
    keyword = "Token"

    def authenticate_credentials(self, key):
        token = (
            ApiToken.objects.select_related("user")
            .filter(token_hash=hash_api_token(key), revoked_at__isnull=True)
            .first()
        )
        if token is None:
            raise exceptions.AuthenticationFailed("Unknown or revoked API token.")
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("This account is disabled.")
        now = timezone.now()
        # As for node tokens: a write per request would only move this by seconds.
        if token.last_used_at is None or now - token.last_used_at >= LAST_USED_PRECISION:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user, token
