"""The query every report takes: a date range, a time bucket, a grouping and a cluster."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from django import forms
from django.db.models import Exists, OuterRef
from django.utils import timezone

from clusters.models import Cluster, Node
from core.inputs import BoundedDateField
from identity.cluster_view import remembered_cluster
from reports.intervals import Span

ALL = "all"
ALL_CLUSTERS = "all clusters"
MAX_DAYS = 366
DEFAULT_DAYS = 30
BUCKETS = {"day": timedelta(days=1), "week": timedelta(days=7)}
GROUPINGS = ("partition", "pool", "account", "user", "qos")
# `group_by` takes a time bucket or a dimension, as the API contract spells it.
GROUP_BY_CHOICES = [
    ("day", "day"),
    ("week", "week"),
    *((name, name) for name in GROUPINGS),
]


@dataclass(frozen=True)
class ReportQuery:
    """A validated report request."""

    start: date
    end: date
    bucket: str
    group: str  # one of GROUPINGS, or "" for no split
    # The cluster read ("" and None: every cluster, combined).
    cluster: str = ""
    cluster_id: int | None = None
    # Several clusters combined: node names are qualified by their cluster, as two
    # clusters may each have a gpu-01 (reports.base.node_label).
    several_clusters: bool = False

    @property
    def group_by(self) -> str:
        return self.group or self.bucket

    @property
    def cluster_label(self) -> str:
        """What the page and the exports call the clusters read."""
        return f"cluster {self.cluster}" if self.cluster else ALL_CLUSTERS

    def span(self, now: datetime | None = None) -> Span:
        zone = timezone.get_current_timezone()
        begin = datetime.combine(self.start, time.min, zone)
        finish = datetime.combine(self.end + timedelta(days=1), time.min, zone)
        now = now or timezone.now()
        return Span(
            start=begin,
            end=finish,
            data_end=max(begin, min(finish, now)),
            bucket=BUCKETS[self.bucket],
            cluster_id=self.cluster_id,
            qualified=self.several_clusters,
        )

    def as_params(self) -> dict[str, str]:
        params = {"start": self.start.isoformat(), "end": self.end.isoformat()}
        params["group_by"] = self.group_by
        if self.group and self.bucket != "day":
            params["bucket"] = self.bucket
        if self.cluster:
            params["cluster"] = self.cluster
        return params


class ReportForm(forms.Form):
    start = BoundedDateField(required=False, input_formats=["%Y-%m-%d"])
    end = BoundedDateField(required=False, input_formats=["%Y-%m-%d"])
    group_by = forms.ChoiceField(required=False, choices=GROUP_BY_CHOICES)
    bucket = forms.ChoiceField(required=False, choices=[("day", "day"), ("week", "week")])
    cluster = forms.CharField(required=False, max_length=64)

    def clean_cluster(self) -> Cluster | None:
        name = self.cleaned_data.get("cluster") or ""
        if name in ("", ALL):
            return None
        found = Cluster.objects.filter(name=name).first()
        if found is None:
            names = ", ".join(known_clusters()) or "none yet"
            raise forms.ValidationError(
                f"No cluster named {name!r}. Known clusters: {names} (or {ALL!r} for all combined)."
            )
        return found

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        end = data.get("end") or timezone.localdate()
        start = data.get("start") or end - timedelta(days=DEFAULT_DAYS - 1)
        if start > end:
            self.add_error("end", "The end date must not be before the start date.")
        elif (end - start).days + 1 > MAX_DAYS:
            self.add_error("start", f"A report covers at most {MAX_DAYS} days.")
        data["start"], data["end"] = start, end
        return data

    def query(self) -> ReportQuery:
        """The validated query; call only after `is_valid()` returned True."""
        data = self.cleaned_data
        group_by = data.get("group_by") or ""
        cluster = data.get("cluster")
        scope = {
            "cluster": cluster.name if cluster else "",
            "cluster_id": cluster.pk if cluster else None,
            "several_clusters": cluster is None and clusters_with_nodes().count() > 1,
        }
        if group_by in BUCKETS:
            return ReportQuery(data["start"], data["end"], bucket=group_by, group="", **scope)
        # No grouping chosen (a tab that shows only the time bucket): the bucket chosen.
        return ReportQuery(
            data["start"], data["end"], bucket=data.get("bucket") or "day", group=group_by, **scope
        )


def known_clusters() -> list[str]:
    """The names a report's `cluster` may take, besides "all"."""
    return list(Cluster.objects.order_by("name").values_list("name", flat=True))


def clusters_with_nodes():
    return Cluster.objects.filter(Exists(Node.objects.filter(cluster=OuterRef("pk"))))


def requested_cluster(request) -> str:
    """The cluster a report is read for: its `cluster` parameter ("" or "all": every
    cluster combined), else the one the person last chose in the header's switcher."""
    if "cluster" in request.GET:
        return request.GET["cluster"]
    remembered = remembered_cluster(request.user)
    return remembered.name if remembered else ""


def report_form(request) -> ReportForm:
    """The filters of a report request, the cluster read as `requested_cluster` says."""
    data = request.GET.copy()
    data["cluster"] = requested_cluster(request)
    return ReportForm(data)


def default_query() -> ReportQuery:
    form = ReportForm({})
    form.is_valid()
    return form.query()
