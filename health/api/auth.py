"""Node-agent authentication: `Authorization: Bearer <token>`, one token per node."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions

from health.models import NodeToken, hash_token

LAST_USED_PRECISION = timedelta(minutes=1)


class AgentPrincipal:
    """The authenticated caller when a node agent posts events."""

    is_authenticated = True
    is_anonymous = False
    is_superuser = False
    is_active = True

    def __init__(self, token: NodeToken):
        self.token = token
        self.node = token.node
        self.pk = None
        self.username = f"agent:{token.node.name}"

    def __str__(self) -> str:
        return self.username


class NodeTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].decode(errors="replace") != self.keyword:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Malformed Authorization header.")
        raw = header[1].decode(errors="replace")
        token = (
            NodeToken.objects.select_related("node")
            .filter(token_hash=hash_token(raw), revoked_at__isnull=True)
            .first()
        )
        if token is None:
            raise exceptions.AuthenticationFailed("Unknown or revoked node token.")
        now = timezone.now()
        # A busy agent posts many batches a minute; a write (and a commit) per request
        # would only move this time by seconds, so it is kept to a minute's precision.
        if token.last_used_at is None or now - token.last_used_at >= LAST_USED_PRECISION:
            NodeToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return AgentPrincipal(token), token

    def authenticate_header(self, request) -> str:
        return self.keyword


class IsNodeAgent(permissions.BasePermission):
    message = "A node agent token is required."

    def has_permission(self, request, view) -> bool:
        return isinstance(request.user, AgentPrincipal)


class NodeTokenScheme(OpenApiAuthenticationExtension):
    """Documents the node token in the OpenAPI schema (spectacular warns without it)."""

    target_class = NodeTokenAuthentication
    name = "nodeToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "A node agent's token."}
