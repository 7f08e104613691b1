"""Node-agent authentication: `Authorization: Bearer <token>`, one token per node."""

from __future__ import annotations

from django.utils import timezone
from rest_framework import authentication, exceptions, permissions

from health.models import NodeToken, hash_token


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
        NodeToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
        return AgentPrincipal(token), token

    def authenticate_header(self, request) -> str:
        return self.keyword


class IsNodeAgent(permissions.BasePermission):
    message = "A node agent token is required."

    def has_permission(self, request, view) -> bool:
        return isinstance(request.user, AgentPrincipal)
