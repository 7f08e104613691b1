"""The query every report takes: a date range, a time bucket and a grouping."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from django import forms
from django.utils import timezone

from core.inputs import BoundedDateField
from reports.intervals import Span

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

    @property
    def group_by(self) -> str:
        return self.group or self.bucket

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
        )

    def as_params(self) -> dict[str, str]:
        params = {"start": self.start.isoformat(), "end": self.end.isoformat()}
        params["group_by"] = self.group_by
        if self.group and self.bucket != "day":
            params["bucket"] = self.bucket
        return params


class ReportForm(forms.Form):
    start = BoundedDateField(required=False, input_formats=["%Y-%m-%d"])
    end = BoundedDateField(required=False, input_formats=["%Y-%m-%d"])
    group_by = forms.ChoiceField(required=False, choices=GROUP_BY_CHOICES)
    bucket = forms.ChoiceField(required=False, choices=[("day", "day"), ("week", "week")])

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
        if group_by in BUCKETS:
            return ReportQuery(data["start"], data["end"], bucket=group_by, group="")
        # No grouping chosen (a tab that shows only the time bucket): the bucket chosen.
        return ReportQuery(
            data["start"], data["end"], bucket=data.get("bucket") or "day", group=group_by
        )


def default_query() -> ReportQuery:
    form = ReportForm({})
    form.is_valid()
    return form.query()
