"""API: list, request, inspect, approve and reject remediation runs."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers, status, viewsets
from rest_framework.decorators import action as api_action
from rest_framework.response import Response

from clusters.models import Node
from core.roles import HasAnyRole, IsMedbayAdmin
from portal.api_schema import ErrorSerializer
from remediation import actions, services
from remediation.forms import RunFilterForm
from remediation.models import Remediation, RemediationStep


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The request conflicts with the run's current state."
    default_code = "conflict"


class StepSerializer(serializers.ModelSerializer):
    class Meta:
        model = RemediationStep
        fields = [
            "index",
            "name",
            "attempt",
            "outcome",
            "message",
            "worker",
            "started_at",
            "finished_at",
        ]


class RemediationSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.name", read_only=True)
    # Policy-triggered runs have no requester, and undecided runs no decider.
    requested_by = serializers.CharField(
        source="requested_by.username", default=None, allow_null=True, read_only=True
    )
    approved_by = serializers.CharField(
        source="approved_by.username", default=None, allow_null=True, read_only=True
    )

    class Meta:
        model = Remediation
        fields = [
            "id",
            "node",
            "action",
            "trigger",
            "status",
            "reason",
            "dry_run",
            "planned_steps",
            "current_step",
            "incident",
            "policy",
            "requested_by",
            "approved_by",
            "decision_comment",
            "decided_at",
            "created_at",
            "updated_at",
            "finished_at",
            "message",
        ]
        read_only_fields = fields


class RemediationDetailSerializer(RemediationSerializer):
    steps = StepSerializer(many=True, read_only=True)

    class Meta(RemediationSerializer.Meta):
        fields = [*RemediationSerializer.Meta.fields, "steps"]
        read_only_fields = fields


class RunRequestSerializer(serializers.Serializer):
    node = serializers.CharField(max_length=128)
    # Only what an admin may ask for: the policies' rungs (notify) are refused.
    action = serializers.ChoiceField(choices=[(str(a), a.label) for a in actions.ADMIN_ACTIONS])
    reason = serializers.CharField(max_length=actions.MAX_REASON)
    grace_s = serializers.IntegerField(
        min_value=0, max_value=actions.MAX_GRACE_S, required=False, allow_null=True
    )
    # Uncordon / return to service of a node with failed GPUs must say it means it.
    confirm = serializers.BooleanField(required=False, default=False)
    pool = serializers.ChoiceField(choices=actions.RETURN_POOLS, required=False, default="")

    def validate_action(self, action: str) -> str:
        if action not in actions.ADMIN_ACTIONS:
            allowed = ", ".join(actions.ADMIN_ACTIONS)
            raise serializers.ValidationError(f"Admins may request {allowed}; not {action}.")
        return action

    def validate_node(self, name: str) -> Node:
        node = Node.objects.select_related("pool").filter(name=name).order_by("cluster_id").first()
        if node is None:
            raise serializers.ValidationError(f"No node named {name!r}.")
        return node


class DecisionSerializer(serializers.Serializer):
    comment = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


def decision(verb: str, limit: int, *, required: bool) -> type[DecisionSerializer]:
    """A decision's body as its action reads it: `actions` caps and requires the comment."""
    if required:
        comment = serializers.CharField(max_length=limit)
    else:
        comment = serializers.CharField(
            max_length=limit, required=False, allow_blank=True, default=""
        )
    name = f"{verb.title()}DecisionSerializer"  # the schema's ApproveDecision, ...
    return type(name, (DecisionSerializer,), {"comment": comment})


# Per decision: what it does, and its comment's limit and whether it needs one, as
# remediation.actions enforces them (the schema documented 500 for all).
DECISIONS = {
    "approve": (actions.approve, decision("approve", 500, required=False)),
    "reject": (actions.reject, decision("reject", 500, required=True)),
    "cancel": (actions.cancel, decision("cancel", 400, required=True)),
    "retry": (actions.retry, decision("retry", 400, required=False)),
    "release": (actions.cancel_and_release, decision("release", 150, required=True)),
}


def decided(name: str, summary: str):
    return extend_schema(
        request=DECISIONS[name][1],
        responses={200: RemediationDetailSerializer, 409: ErrorSerializer},
        description=summary,
    )


class RemediationViewSet(viewsets.ReadOnlyModelViewSet):
    """Remediation runs; admins request them and decide those awaiting approval."""

    queryset = Remediation.objects.select_related("node", "requested_by", "approved_by")

    def get_permissions(self):
        if self.action in ("list", "retrieve"):
            return [HasAnyRole()]
        return [IsMedbayAdmin()]

    def get_serializer_class(self):
        if self.action == "retrieve":
            return RemediationDetailSerializer
        if self.action == "create":
            return RunRequestSerializer
        if self.action in DECISIONS:
            return DECISIONS[self.action][1]
        return RemediationSerializer

    def get_queryset(self):
        runs = self.queryset
        if self.action == "retrieve":
            return runs.prefetch_related("steps")
        filters = RunFilterForm(self.request.query_params)
        if self.action == "list" and not filters.is_valid():
            raise exceptions.ValidationError(filters.errors)
        return filters.apply(runs, exact_node=True)

    @extend_schema(
        request=RunRequestSerializer,
        responses={201: RemediationDetailSerializer, 409: ErrorSerializer},
    )
    def create(self, request):
        body = RunRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        run = _call(
            actions.request_action,
            data["node"],
            data["action"],
            user=request.user,
            reason=data["reason"],
            grace_s=data.get("grace_s"),
            confirm=data["confirm"],
            pool=data["pool"],
        )
        return Response(RemediationDetailSerializer(run).data, status=status.HTTP_201_CREATED)

    @decided("approve", "Approve a run awaiting approval.")
    @api_action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        return self._decide(request, "approve")

    @decided("reject", "Turn down a run awaiting approval; the comment says why.")
    @api_action(detail=True, methods=["post"])
    def reject(self, request, pk=None):
        return self._decide(request, "reject")

    @decided("cancel", "Cancel a run; the comment says why.")
    @api_action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        return self._decide(request, "cancel")

    @decided("retry", "Run a run that needs attention again from the step that stopped it.")
    @api_action(detail=True, methods=["post"])
    def retry(self, request, pk=None):
        return self._decide(request, "retry")

    @decided("release", "Cancel the run and release its node through a new uncordon run.")
    @api_action(detail=True, methods=["post"])
    def release(self, request, pk=None):
        return self._decide(request, "release")

    def _decide(self, request, name: str):
        run = self.get_object()
        decide, serializer = DECISIONS[name]
        body = serializer(data=request.data)
        body.is_valid(raise_exception=True)
        run = _call(decide, run, request.user, body.validated_data["comment"])
        return Response(RemediationDetailSerializer(run).data)


def _call(function, *args, **kwargs) -> Remediation:
    """Run one action, turning its refusals into the API's 400/403/409 answers."""
    try:
        return function(*args, **kwargs)
    except actions.ActionError as error:
        raise exceptions.ValidationError({error.field: [error.message]}) from error
    except actions.NotPermitted as error:
        raise exceptions.PermissionDenied(str(error)) from error
    except (actions.WrongStatus, services.NodeBusy) as error:
        raise Conflict(str(error)) from error
