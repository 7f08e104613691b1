"""Each person's notification preferences: channels per kind of event, a webhook, a test."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from core.roles import ANY_ROLE, role_required
from jobs import notifications, webhooks
from jobs.models import NotificationDelivery, NotificationKind

KIND_CHOICES = [(kind.value, kind.label) for kind in NotificationKind if kind != "test"]
HINTS = {
    NotificationKind.FAULT: "A node under your job is failing, or the job hit a fault of its own.",
    NotificationKind.RESTARTED: "Medbay restarted your job on healthy nodes.",
    NotificationKind.REQUEUED: "Your job went back to the queue to run again.",
    NotificationKind.FINISHED: "A job that Medbay restarted has ended.",
    NotificationKind.ACTION: "Medbay could not requeue your job: resubmit it to run it again.",
}


class PreferencesForm(forms.Form):
    email_kinds = forms.MultipleChoiceField(
        choices=KIND_CHOICES, required=False, widget=forms.CheckboxSelectMultiple
    )
    webhook_kinds = forms.MultipleChoiceField(
        choices=KIND_CHOICES, required=False, widget=forms.CheckboxSelectMultiple
    )
    # Text, not type=url: the browser's own check would hide the server's reasons.
    webhook_url = forms.CharField(
        label="Webhook URL",
        required=False,
        max_length=webhooks.MAX_URL_LENGTH,
        widget=forms.TextInput(
            attrs={
                "inputmode": "url",
                "autocomplete": "off",
                "spellcheck": "false",
                "placeholder": "https://hooks.slack.com/services/…",
            }
        ),
    )
    paused = forms.BooleanField(label="Pause all notifications", required=False)

    def clean_webhook_url(self) -> str:
        url = self.cleaned_data["webhook_url"].strip()
        if url:
            try:
                webhooks.check(url)
            except webhooks.Refused as error:
                raise forms.ValidationError(str(error)) from None
        return url


@require_http_methods(["GET", "POST"])
@role_required(*ANY_ROLE)
def preferences(request):
    saved = notifications.preferences_of(request.user)
    if request.method == "POST":
        form = PreferencesForm(request.POST)
        if form.is_valid():
            notifications.save_preferences(request.user, **form.cleaned_data)
            messages.success(request, "Notification preferences saved.")
            return redirect("notification-preferences")
    else:
        form = PreferencesForm(initial=saved)
    url = saved.get("webhook_url", "")
    context = {
        "form": form,
        "rows": _rows(form),
        "saved_destination": webhooks.describe(url) if url else "",
        "deliveries": notifications.recent_deliveries(request.user),
        "last_webhook": _last_webhook(request.user),
    }
    return render(request, "jobs/notifications.html", context, status=400 if form.errors else 200)


@require_POST
@role_required(*ANY_ROLE)
def send_test(request):
    try:
        delivery = notifications.send_test(request.user)
    except notifications.TestNotSent as error:
        messages.error(request, str(error))
    else:
        if delivery.failed:
            messages.error(request, f"The test was not delivered: {delivery.error}")
        else:
            messages.success(request, f"Test delivered (HTTP {delivery.status_code}).")
    return redirect("notification-preferences")


def _rows(form: PreferencesForm) -> list[dict]:
    """One row per kind: its name, what it means, its email and webhook checkboxes."""
    return [
        {"value": value, "label": label, "hint": HINTS[value], "email": email, "webhook": hook}
        for (value, label), email, hook in zip(
            KIND_CHOICES, form["email_kinds"], form["webhook_kinds"], strict=True
        )
    ]


def _last_webhook(user) -> NotificationDelivery | None:
    return (
        NotificationDelivery.objects.filter(user=user, channel=NotificationDelivery.Channel.WEBHOOK)
        .only("at", "kind", "outcome", "error", "status_code")
        .first()
    )
