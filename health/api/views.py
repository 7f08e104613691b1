from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.generics import ListAPIView
from rest_framework.response import Response

from agent import schema
from core.roles import HasAnyRole
from health.api.auth import IsNodeAgent, NodeTokenAuthentication
from health.ingest import BatchInvalid, ingest, validate_batch
from health.models import HealthEvent
from health.queries import filter_events

MAX_BODY_BYTES = 2 * 1024 * 1024


class HealthEventSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.name")
    title = serializers.CharField()
    check = serializers.CharField(source="check_name")

    class Meta:
        model = HealthEvent
        fields = [
            "id", "node", "kind", "xid", "title", "gpu_index", "pci", "check", "status",
            "severity", "message", "count", "observed_at", "last_observed_at", "incident",
        ]  # fmt: skip


def _documented(field: schema.Field) -> serializers.Field:
    """The OpenAPI description of one field of the agent event schema."""
    options = {"help_text": field.description, "required": field.required}
    if not field.required:
        options["allow_null"] = True
    if field.type == "choice":
        return serializers.ChoiceField(list(field.choices), **options)
    if field.type == "integer":
        return serializers.IntegerField(min_value=0, max_value=field.limit, **options)
    if field.type == "timestamp":
        return serializers.DateTimeField(**options)
    if field.type == "object":
        return serializers.DictField(**options)
    if field.pattern:
        return serializers.RegexField(field.pattern, max_length=field.limit, **options)
    return serializers.CharField(max_length=field.limit, allow_blank=not field.required, **options)


AGENT_EVENT_FIELDS = {field.name: _documented(field) for field in schema.FIELDS}


class HealthEventsView(ListAPIView):
    """GET: the event feed (any role). POST: a node agent's batch (node token)."""

    serializer_class = HealthEventSerializer

    def initialize_request(self, request, *args, **kwargs):
        self._posting = request.method == "POST"
        return super().initialize_request(request, *args, **kwargs)

    def get_authenticators(self):
        if getattr(self, "_posting", False):
            return [NodeTokenAuthentication()]
        return super().get_authenticators()

    def get_permissions(self):
        return [IsNodeAgent()] if getattr(self, "_posting", False) else [HasAnyRole()]

    @extend_schema(
        parameters=[
            OpenApiParameter(name, str, required=False)
            for name in ("node", "gpu", "xid", "severity", "since", "until", "kind")
        ]
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        events = HealthEvent.objects.select_related("node")
        return filter_events(events, self.request.query_params)

    @extend_schema(
        request=inline_serializer(
            "AgentBatch",
            {
                "node": serializers.CharField(),
                "events": inline_serializer("AgentEvent", AGENT_EVENT_FIELDS, many=True),
            },
        ),
        responses={
            201: inline_serializer(
                "AgentBatchAccepted",
                {
                    "accepted": serializers.IntegerField(),
                    "duplicates": serializers.IntegerField(),
                    "folded": serializers.IntegerField(),
                },
            )
        },
    )
    def post(self, request, *args, **kwargs):
        length = int(request.META.get("CONTENT_LENGTH") or 0)
        if length > MAX_BODY_BYTES:
            return Response(
                {"detail": f"Payload too large; at most {MAX_BODY_BYTES} bytes.", "errors": {}},
                status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
            )
        try:
            batch = validate_batch(request.data)
        except BatchInvalid as invalid:
            raise ValidationError(invalid.errors) from None
        node = request.user.node
        # The same answer for another node and for no node at all: the token alone
        # must not tell which node names exist.
        if batch.node != node.name:
            raise PermissionDenied(
                f"This token belongs to {node.name}; it cannot report for {batch.node!r}."
            )
        result = ingest(node, batch.events)
        return Response(
            {"accepted": result.accepted, "duplicates": result.duplicates, "folded": result.folded},
            status=status.HTTP_201_CREATED,
        )
