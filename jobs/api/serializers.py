from __future__ import annotations

from django import forms
from drf_spectacular.utils import inline_serializer
from rest_framework import serializers

from jobs.access import visible_params, visible_script
from jobs.forms import JobForm
from jobs.models import Job, JobProgress, JobStateChange
from jobs.queries import job_url
from jobs.reasons import plain_reason


class JobSerializer(serializers.ModelSerializer):
    id = serializers.IntegerField(source="slurm_id", read_only=True)
    cluster = serializers.CharField(source="cluster.name", read_only=True)
    url = serializers.SerializerMethodField(help_text="the job's page in the portal")
    reason_text = serializers.SerializerMethodField()
    # Null for a job Medbay did not submit (the sync found it in squeue).
    submitted_by = serializers.SlugRelatedField(
        slug_field="username",
        read_only=True,
        allow_null=True,
        help_text="the Medbay user who submitted it; null if it was not submitted through Medbay",
    )

    class Meta:
        model = Job
        fields = [
            "id", "cluster", "url", "name", "user", "account", "partition", "state", "reason",
            "reason_text",
            "node_names", "node_count", "gpus", "submit_at", "start_at", "end_at",
            "eligible_at", "restart_count", "requeue", "exit_code", "time_limit_minutes",
            "submitted_by",
        ]  # fmt: skip
        read_only_fields = fields

    def get_reason_text(self, job) -> str:
        return plain_reason(job)

    def get_url(self, job) -> str:
        return job_url(job)


class StateChangeSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobStateChange
        fields = ["from_state", "to_state", "reason", "actor", "restart_count", "at"]


class ProgressSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobProgress
        fields = ["step", "checkpoint_saved", "restart_count", "reported_at"]


class JobDetailSerializer(JobSerializer):
    """Adds parameters, history and progress; the script only for its owner or an admin."""

    params = serializers.SerializerMethodField()
    script = serializers.SerializerMethodField()
    history = serializers.SerializerMethodField()
    progress = serializers.SerializerMethodField()

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "params", "script", "history", "progress"]
        read_only_fields = fields

    def get_params(self, job) -> dict:
        return visible_params(self.context["request"].user, job)

    def get_script(self, job) -> str | None:
        return visible_script(self.context["request"].user, job)

    def get_history(self, job) -> list[dict]:
        rows = job.state_changes.order_by("at", "id")
        return StateChangeSerializer(rows, many=True).data

    def get_progress(self, job) -> list[dict]:
        rows = job.progress_reports.order_by("-reported_at", "-id")[:20]
        return ProgressSerializer(rows, many=True).data


class ProgressReportSerializer(serializers.Serializer):
    step = serializers.IntegerField(min_value=0, max_value=2**62)
    checkpoint_saved = serializers.BooleanField(default=False)
    restart_count = serializers.IntegerField(min_value=0, max_value=1_000_000, default=0)


class TimelineEventSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    kind = serializers.CharField()
    title = serializers.CharField()
    detail = serializers.CharField()
    run = serializers.IntegerField(allow_null=True, help_text="the remediation run it belongs to")


class RestartSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    cause = serializers.CharField()
    explanation = serializers.CharField()
    run = serializers.IntegerField(
        allow_null=True, help_text="the remediation run that requeued it"
    )
    xid = serializers.IntegerField(allow_null=True)
    gpu = serializers.IntegerField(allow_null=True)
    node = serializers.CharField(allow_null=True)
    replacement = serializers.CharField(
        allow_null=True, help_text="the spare that replaced the node"
    )
    resumed_at = serializers.DateTimeField(allow_null=True)
    resumed_nodes = serializers.ListField(child=serializers.CharField())
    resumed_from_step = serializers.IntegerField(allow_null=True)
    time_lost_s = serializers.IntegerField(
        allow_null=True, help_text="from the fault (or Medbay's action) to running again"
    )
    lost_gpu_hours = serializers.FloatField(allow_null=True)


def job_input(name: str, *, required: bool = True, **extra):
    """The API's schema of the job form: its names, limits and choices, read from it.

    `required=False` (resubmit) makes every field optional: the stored job fills in
    what the body leaves out.
    """
    fields = {
        field_name: _api_field(field_name, field, required=required and field.required)
        for field_name, field in JobForm.base_fields.items()
    }
    return inline_serializer(name, {**fields, **extra})


def _api_field(name: str, field: forms.Field, *, required: bool) -> serializers.Field:
    text = str(field.help_text or field.label or "")
    common = {"required": required, "help_text": text or None}
    if name == "env_setup":
        return serializers.ListField(child=serializers.CharField(), **common)
    if name == "auto_resume":
        return serializers.BooleanField(
            allow_null=True, **{**common, "help_text": "left out or null: automatic"}
        )
    if name in ("partition", "cluster"):
        # The choices are the cluster's partitions, read when the form is bound.
        return serializers.CharField(**common)
    if isinstance(field, forms.ChoiceField):
        return serializers.ChoiceField([value for value, _ in field.choices], **common)
    if isinstance(field, forms.IntegerField):
        return serializers.IntegerField(
            min_value=field.min_value, max_value=field.max_value, **common
        )
    return serializers.CharField(
        max_length=field.max_length, allow_blank=not field.required, **common
    )
