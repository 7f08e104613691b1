"""Jobs API: list, detail, submit, resubmit, cancel, timeline and the job's own progress posts."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import exceptions, serializers, status
from rest_framework.authentication import get_authorization_header
from rest_framework.generics import ListAPIView
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from clusters.addresses import SeveralClusters
from clusters.models import Cluster
from core.roles import HasAnyRole
from jobs import cluster_accounts, services
from jobs.access import can_submit, owns
from jobs.api.serializers import (
    JobDetailSerializer,
    JobSerializer,
    ProgressReportSerializer,
    ProgressSerializer,
    RestartSerializer,
    TimelineEventSerializer,
    job_input,
)
from jobs.forms import (
    RUN_AS_OWNER,
    RUN_AS_SELF,
    JobForm,
    form_data_from_json,
    initial_from_params,
)
from jobs.models import Job
from jobs.queries import filter_jobs, job_at, now_first, visible_jobs
from jobs.timeline import build_timeline
from portal.api_schema import ErrorSerializer

JOB_INPUT = job_input("JobInput")
# Every field optional: the stored job fills in what the body leaves out.
RESUBMIT_INPUT = job_input(
    "ResubmitInput",
    required=False,
    run_as=serializers.ChoiceField(
        [RUN_AS_OWNER, RUN_AS_SELF],
        required=False,
        help_text="another person's job: owner (default) reruns it unchanged as its "
        "owner; self runs your edits as your own Unix account",
    ),
)


def bind_form(payload, initial: dict | None = None, *, user=None, cluster=None) -> JobForm:
    """Validate API input with the page's own form; raises a 400 with per-field errors.
    With USER, `cluster` may name any cluster where USER has a Unix account."""
    if not isinstance(payload, dict):
        raise exceptions.ValidationError({"non_field_errors": ["Send a JSON object."]})
    data = {**(initial or {}), **form_data_from_json(payload)}
    if user is not None:
        offered = cluster_accounts.submit_clusters(user)
        cluster = cluster_accounts.chosen_cluster(offered, data.get("cluster"))
        form = JobForm(data, cluster=cluster, clusters=offered)
    else:
        cluster = cluster or cluster_accounts.default_cluster()
        data["cluster"] = cluster.name  # a resubmitted job runs where it ran
        form = JobForm(data, cluster=cluster)
    if not form.is_valid():
        errors = {
            ("non_field_errors" if field == "__all__" else field): list(messages)
            for field, messages in form.errors.items()
        }
        raise exceptions.ValidationError(errors)
    return form


def _submitted(job: Job, request) -> Response:
    data = JobDetailSerializer(job, context={"request": request}).data
    return Response(data, status=status.HTTP_201_CREATED)


def _refused(error: services.SubmissionFailed) -> Response:
    if isinstance(error, services.RunAsRefused):
        return Response({"detail": error.message, "errors": {}}, status.HTTP_400_BAD_REQUEST)
    code = status.HTTP_400_BAD_REQUEST if error.permanent else status.HTTP_503_SERVICE_UNAVAILABLE
    return Response({"detail": f"Slurm refused the job: {error.message}", "errors": {}}, code)


def known_cluster(request) -> str:
    """The `cluster` the request names ("" for none, "all" for every one); a 400 that
    lists the clusters where Medbay watches none by that name."""
    name = request.query_params.get("cluster", "")
    if name in ("", "all") or Cluster.objects.filter(name=name[:64]).exists():
        return name if name != "all" else ""
    known = ", ".join(Cluster.objects.order_by("name").values_list("name", flat=True))
    raise exceptions.ValidationError(
        {"cluster": [f"No cluster named {name[:64]!r}; Medbay watches: {known or 'none'}."]}
    )


def api_job(request, slurm_id: int) -> Job:
    """The job `{id}` on `?cluster=` (or the one cluster that has it); a 400 naming the
    clusters where several have it and the request names none."""
    try:
        return job_at(request.user, slurm_id, known_cluster(request))
    except SeveralClusters as several:
        names = [cluster for cluster, _ in several.choices]
        raise exceptions.ValidationError(
            {"cluster": [f"Job {slurm_id} exists on {', '.join(names)}: say which, ?cluster=."]}
        ) from None


class JobListView(ListAPIView):
    """GET: jobs you may see (filters state, partition, user). POST: submit a job."""

    serializer_class = JobSerializer
    permission_classes = [HasAnyRole]

    def get_queryset(self):
        known_cluster(self.request)
        jobs = visible_jobs(self.request.user).select_related("cluster").order_by(*now_first())
        return filter_jobs(jobs, self.request.query_params)

    @extend_schema(
        parameters=[
            OpenApiParameter(n, str, required=False)
            for n in ("cluster", "state", "partition", "user")
        ]
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(request=JOB_INPUT, responses={201: JobDetailSerializer, 503: ErrorSerializer})
    def post(self, request):
        # Refuse before validating: a role that may not submit learns nothing of the form.
        if not can_submit(request.user):
            raise DjangoPermissionDenied("Your role cannot submit jobs.")
        form = bind_form(request.data, user=request.user)
        try:
            job = services.submit_job(request.user, form.params, cluster=form.chosen_cluster())
        except services.SubmissionFailed as error:
            return _refused(error)
        return _submitted(job, request)


class JobDetailView(APIView):
    permission_classes = [HasAnyRole]

    @extend_schema(responses=JobDetailSerializer)
    def get(self, request, slurm_id: int):
        job = api_job(request, slurm_id)
        return Response(JobDetailSerializer(job, context={"request": request}).data)


class JobResubmitView(APIView):
    """A new job from this one's parameters, with any fields in the body changed.

    Nobody runs code as someone else. Your own job runs as you, edited or not.
    Another person's job (admins) runs either unchanged as its owner (`run_as`:
    `owner`, the default: the body may only repeat the stored values) or, with
    `run_as`: `self`, edited as your own Unix account, without the owner's set-up
    lines. An edit sent with `owner` is a 400 whose `errors` name the edited fields.
    """

    permission_classes = [HasAnyRole]

    @extend_schema(
        request=RESUBMIT_INPUT,
        responses={201: JobDetailSerializer, 503: ErrorSerializer},
    )
    def post(self, request, slurm_id: int):
        job = api_job(request, slurm_id)
        as_self = _run_as_self(request.data)
        try:
            services.check_resubmittable(request.user, job, as_self=as_self)
        except services.NotYourScript as error:
            return _not_yours(error)
        except services.RunAsRefused as error:
            return _refused(error)
        initial = initial_from_params(job.params)
        if not owns(request.user, job):
            initial.pop("env_setup", None)  # the owner's, hidden: never a default for others
        form = bind_form(request.data, initial=initial, cluster=job.cluster)
        try:
            new_job = services.resubmit_job(request.user, job, form.params, as_self=as_self)
        except services.NotYourScript as error:
            return _not_yours(error)
        except services.SubmissionFailed as error:
            return _refused(error)
        return _submitted(new_job, request)


def _run_as_self(payload) -> bool:
    value = payload.get("run_as") if isinstance(payload, dict) else None
    if value in (None, RUN_AS_OWNER, RUN_AS_SELF):
        return value == RUN_AS_SELF
    raise exceptions.ValidationError({"run_as": [f"Choose {RUN_AS_OWNER} or {RUN_AS_SELF}."]})


def _not_yours(error: services.NotYourScript) -> Response:
    errors = {field: [_why(field)] for field in error.fields}
    return Response({"detail": error.message, "errors": errors}, status.HTTP_400_BAD_REQUEST)


def _why(field: str) -> str:
    if field == "run_as":
        return f"Another person's job runs unchanged as its owner, or as you ({RUN_AS_SELF})."
    return "Changed from the stored job."


class JobCancelView(APIView):
    permission_classes = [HasAnyRole]

    @extend_schema(
        request=None,
        responses={200: JobDetailSerializer, 409: ErrorSerializer, 503: ErrorSerializer},
    )
    def post(self, request, slurm_id: int):
        job = api_job(request, slurm_id)
        try:
            job = services.cancel_job(request.user, job)
        except services.JobNotActive as error:
            return Response({"detail": str(error), "errors": {}}, status.HTTP_409_CONFLICT)
        except services.SubmissionFailed as error:
            return _refused(error)
        return Response(JobDetailSerializer(job, context={"request": request}).data)


class JobTimelineView(APIView):
    permission_classes = [HasAnyRole]

    @extend_schema(
        responses=inline_serializer(
            "JobTimeline",
            {
                "job": serializers.IntegerField(),
                "summary": serializers.CharField(),
                "restarts": RestartSerializer(many=True),
                "events": TimelineEventSerializer(many=True),
            },
        )
    )
    def get(self, request, slurm_id: int):
        timeline = build_timeline(api_job(request, slurm_id))
        return Response(
            {
                "job": timeline.job.slurm_id,
                "summary": timeline.summary,
                "restarts": RestartSerializer(
                    [r.as_dict() for r in timeline.restarts], many=True
                ).data,
                "events": TimelineEventSerializer(
                    [e.as_dict() for e in timeline.events], many=True
                ).data,
            }
        )


class JobProgressView(APIView):
    """A running job reports its step with `Authorization: Bearer <job token>`."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(
        request=ProgressReportSerializer,
        responses={201: ProgressSerializer, 401: ErrorSerializer, 403: ErrorSerializer},
    )
    def post(self, request, slurm_id: int):
        header = get_authorization_header(request).split()
        if len(header) != 2 or header[0] != b"Bearer":
            return _unauthorized("A job token is required (Authorization: Bearer ...).")
        try:
            token = services.token_for(header[1].decode(errors="replace"), slurm_id)
        except services.TokenRefused as error:
            if error.ended:
                return Response({"detail": error.message, "errors": {}}, status.HTTP_403_FORBIDDEN)
            return _unauthorized(error.message)
        report = ProgressReportSerializer(data=request.data)
        report.is_valid(raise_exception=True)
        progress = services.record_progress(token, **report.validated_data)
        return Response(ProgressSerializer(progress).data, status=status.HTTP_201_CREATED)


def _unauthorized(message: str) -> Response:
    response = Response({"detail": message, "errors": {}}, status.HTTP_401_UNAUTHORIZED)
    response["WWW-Authenticate"] = "Bearer"
    return response
