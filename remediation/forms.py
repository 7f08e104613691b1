"""Forms of the remediation pages: they parse and validate, actions.py mutates."""

from __future__ import annotations

from datetime import datetime, time, timedelta

from django import forms
from django.utils import timezone

from core.inputs import BoundedDateField
from remediation.actions import MAX_GRACE_S, MAX_REASON
from remediation.models import Policy
from remediation.transitions import ACTIVE, RunStatus

MAX_XID = 999  # NVIDIA's codes are three digits at most
MAX_REPLAY_DAYS = 90


class ActionRequestForm(forms.Form):
    reason = forms.CharField(max_length=MAX_REASON, widget=forms.TextInput(attrs={"size": 60}))
    grace_s = forms.IntegerField(
        label="Checkpoint grace (s)",
        min_value=0,
        max_value=MAX_GRACE_S,
        required=False,
        help_text="Leave empty for the partition's grace.",
    )
    confirm = forms.BooleanField(
        required=False, label="Yes, put it back into service with those GPUs"
    )
    pool = forms.ChoiceField(
        choices=[("spare", "the spare pool"), ("original", "the pool it left")],
        required=False,
        label="Back to",
    )


class DecisionForm(forms.Form):
    comment = forms.CharField(max_length=500, required=False, widget=forms.Textarea({"rows": 2}))


class RunFilterForm(forms.Form):
    """The run list's filters; an invalid value is ignored, never a 500."""

    status = forms.ChoiceField(
        choices=[("", "all"), ("active", "active")] + list(RunStatus.choices), required=False
    )
    action = forms.CharField(max_length=16, required=False)
    node = forms.CharField(max_length=128, required=False)
    trigger = forms.CharField(max_length=16, required=False)

    def apply(self, runs, *, exact_node: bool = False):
        """`runs` narrowed to the valid filters; pages match node names partially."""
        if not self.is_valid():
            return runs
        data = self.cleaned_data
        if data["status"] == "active":
            runs = runs.filter(status__in=[str(s) for s in ACTIVE])
        elif data["status"]:
            runs = runs.filter(status=data["status"])
        if data["action"]:
            runs = runs.filter(action=data["action"])
        if data["trigger"]:
            runs = runs.filter(trigger=data["trigger"])
        if data["node"]:
            lookup = "node__name" if exact_node else "node__name__icontains"
            runs = runs.filter(**{lookup: data["node"]})
        return runs


class PolicyForm(forms.ModelForm):
    class Meta:
        model = Policy
        fields = ["xid", "check_name", "action", "mode", "enabled"]
        labels = {"xid": "XID", "check_name": "Health check"}
        help_texts = {"xid": "An XID code, or leave empty and name a health check."}

    def clean_xid(self):
        xid = self.cleaned_data.get("xid")
        if xid is not None and xid > MAX_XID:
            raise forms.ValidationError(f"XID codes go up to {MAX_XID}.")
        return xid

    def clean_check_name(self):
        name = self.cleaned_data.get("check_name", "").strip()
        if name and not name.replace("_", "").replace("-", "").isalnum():
            raise forms.ValidationError("Letters, digits, '-' and '_' only.")
        # The database only makes XIDs unique; two policies for one check would
        # leave the engine picking one of them arbitrarily.
        others = Policy.objects.filter(check_name=name).exclude(pk=self.instance.pk)
        if name and others.exists():
            raise forms.ValidationError(f"There is already a policy for check {name}.")
        return name

    def clean(self):
        cleaned = super().clean()
        xid, check_name = cleaned.get("xid"), cleaned.get("check_name")
        if xid is None and not check_name and "xid" not in self.errors:
            self.add_error("xid", "Give an XID code or a health check name.")
        if xid is not None and check_name:
            self.add_error("check_name", "A policy answers one XID or one health check, not both.")
        return cleaned


class ReplayForm(forms.Form):
    start = BoundedDateField(widget=forms.DateInput(attrs={"type": "date"}))
    end = BoundedDateField(widget=forms.DateInput(attrs={"type": "date"}))

    def clean(self):
        cleaned = super().clean()
        start, end = cleaned.get("start"), cleaned.get("end")
        if start and end:
            if end < start:
                self.add_error("end", "The end must not be before the start.")
            elif (end - start).days >= MAX_REPLAY_DAYS:
                self.add_error("end", f"Replay at most {MAX_REPLAY_DAYS} days at a time.")
        return cleaned

    def period(self) -> tuple[datetime, datetime]:
        """The whole days chosen, in the portal's time zone, end exclusive."""
        zone = timezone.get_current_timezone()
        start = datetime.combine(self.cleaned_data["start"], time.min, tzinfo=zone)
        end = datetime.combine(self.cleaned_data["end"] + timedelta(days=1), time.min, tzinfo=zone)
        return start, end
