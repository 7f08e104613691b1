"""API: list, request, inspect, approve and reject remediation runs."""

from __future__ import annotations

from rest_framework import exceptions, serializers, status, viewsets
from rest_framework.decorators import action as api_action
from rest_framework.response import Response

from clusters.models import Node
from clusters.remediation import actions, services
from clusters.remediation.forms import RunFilterForm
from clusters.remediation.models import Action, Remediation, RemediationStep
from portal.roles import HasAnyRole, IsMedbayAdmin


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
    action = serializers.ChoiceField(choices=Action.choices)
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
        if self.action in ("approve", "reject", "cancel", "retry", "release"):
            return DecisionSerializer
        return RemediationSerializer

    def get_queryset(self):
        runs = self.queryset
        if self.action == "retrieve":
            return runs.prefetch_related("steps")
        filters = RunFilterForm(self.request.query_params)
        if self.action == "list" and not filters.is_valid():
            raise exceptions.ValidationError(filters.errors)
        return filters.apply(runs, exact_node=True)

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

    @api_action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        return self._decide(request, actions.approve)

    @api_action(detail=True, methods=["post"])
    def reject(self, request, pk=None):
        return self._decide(request, actions.reject)

    @api_action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        return self._decide(request, actions.cancel)

    @api_action(detail=True, methods=["post"])
    def retry(self, request, pk=None):
        """Run a run that needs attention again from the step that stopped it."""
        return self._decide(request, actions.retry)

    @api_action(detail=True, methods=["post"])
    def release(self, request, pk=None):
        """Cancel the run and release its node through a new uncordon run (returned)."""
        return self._decide(request, actions.cancel_and_release)

    def _decide(self, request, decide):
        run = self.get_object()
        body = DecisionSerializer(data=request.data)
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
