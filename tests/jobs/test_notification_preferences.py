"""Each person chooses what reaches them, by email and by webhook; every message is recorded."""

from __future__ import annotations

import re
import socket

import pytest
from django.core import mail

from jobs.models import (
    DeliveryOutcome,
    Job,
    JobState,
    NotificationDelivery,
    NotificationKind,
    ResearcherProfile,
)
from jobs.notifications import (
    TEST_SENDS_PER_MINUTE,
    notify_job_fault,
    notify_job_finished,
    notify_remediation_effect,
)
from tests.jobs.webhook_servers import webhook_server

pytestmark = pytest.mark.django_db
PAGE = "/account/notifications/"
ALL_KINDS = ["fault", "restarted", "requeued", "finished", "action"]


@pytest.fixture(autouse=True)
def nothing_allowed(settings):
    settings.MEDBAY_WEBHOOK_ALLOW = []


@pytest.fixture
def hook(settings):
    settings.MEDBAY_WEBHOOK_ALLOW = ["127.0.0.1"]
    with webhook_server() as server:
        yield server


@pytest.fixture
def dns_public(monkeypatch):
    """hooks.example.org resolves to a public address, without asking real DNS."""
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host == "hooks.example.org":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def texts(server) -> list[str]:
    return [seen.body["text"].splitlines()[0] for seen in server.seen]


def choose(user, *, email=ALL_KINDS, webhook=ALL_KINDS, url="", paused=False):
    return ResearcherProfile.objects.update_or_create(
        user=user,
        defaults={
            "email_kinds": list(email),
            "webhook_kinds": list(webhook),
            "webhook_url": url,
            "notifications_opt_out": paused,
        },
    )[0]


# ---------------------------------------------------------------- what is sent


def test_email_is_sent_only_for_the_kinds_the_person_chose(job_and_run, researcher):
    choose(researcher, email=["restarted"], webhook=[])
    job, run = job_and_run

    notify_remediation_effect(job, what="requeued", remediation=run)
    notify_remediation_effect(job, what="restarted", remediation=run)

    assert [m.subject for m in mail.outbox] == ["[Medbay] Job 1234 (llm) restarted"]


def test_the_webhook_gets_only_its_own_kinds(job_and_run, researcher, hook):
    choose(researcher, email=[], webhook=["fault", "action"], url=f"{hook.url}/h")
    job, run = job_and_run

    for what in ("signalled", "requeued", "restarted", "cancelled"):
        notify_remediation_effect(job, what=what, remediation=run)

    assert mail.outbox == []
    assert texts(hook) == [
        "[Medbay] Job 1234 (llm) was sent USR1 to checkpoint",
        "[Medbay] Job 1234 (llm) was cancelled",
    ]


def test_a_jobs_own_fault_is_sent_as_the_fault_kind(job_and_run, researcher):
    job, _ = job_and_run
    choose(researcher, email=["restarted"], webhook=[])
    notify_job_fault(job, summary="XID 13 on 2 of its nodes")
    assert mail.outbox == []

    choose(researcher, email=["fault"], webhook=[])
    notify_job_fault(job, summary="XID 13 on 2 of its nodes")

    [message] = mail.outbox
    assert "hit a fault of its own" in message.subject
    [row] = NotificationDelivery.objects.all()
    assert (row.kind, row.channel, row.outcome) == ("fault", "email", "delivered")


def test_pausing_stops_every_channel(job_and_run, researcher, hook):
    choose(researcher, url=f"{hook.url}/h", paused=True)
    job, run = job_and_run

    notify_remediation_effect(job, what="restarted", remediation=run)

    assert mail.outbox == [] and hook.seen == []
    assert not NotificationDelivery.objects.exists()


def test_someone_without_preferences_gets_every_kind_by_email(job_and_run):
    job, run = job_and_run

    notify_remediation_effect(job, what="cancelled", remediation=run)

    [message] = mail.outbox
    assert "resubmit" in message.body


def test_a_job_that_finished_after_a_restart_is_its_own_kind(job_and_run, researcher, hook):
    choose(researcher, email=["finished"], webhook=["restarted"], url=f"{hook.url}/h")
    job, _ = job_and_run
    Job.objects.filter(pk=job.pk).update(state=JobState.COMPLETED, restart_count=2)
    job.refresh_from_db()

    notify_job_finished(job)

    [message] = mail.outbox
    assert message.subject == "[Medbay] Job 1234 (llm) finished after a restart"
    assert "ended COMPLETED after being restarted 2 times" in message.body
    assert hook.seen == []


def test_a_job_never_restarted_or_still_running_is_not_announced_as_finished(job_and_run):
    job, _ = job_and_run
    notify_job_finished(job)  # PENDING, never restarted
    Job.objects.filter(pk=job.pk).update(state=JobState.COMPLETED)
    job.refresh_from_db()
    notify_job_finished(job)

    assert mail.outbox == []


def test_every_message_leaves_a_delivery_row_with_its_outcome(job_and_run, researcher, hook):
    choose(researcher, email=["requeued"], webhook=["requeued"], url=f"{hook.url}/secret-path")
    job, run = job_and_run

    notify_remediation_effect(job, what="requeued", remediation=run)

    rows = {row.channel: row for row in NotificationDelivery.objects.filter(user=researcher)}
    assert rows["email"].outcome == DeliveryOutcome.DELIVERED
    assert rows["email"].destination == "alice@example.org"
    assert rows["webhook"].outcome == DeliveryOutcome.DELIVERED
    assert rows["webhook"].status_code == 200
    assert rows["webhook"].kind == NotificationKind.REQUEUED and rows["webhook"].job == job
    # The path of a Slack or Teams address is its secret: never stored in the log.
    assert rows["webhook"].destination == f"http://127.0.0.1:{hook.port}/…"


def test_a_saved_address_the_site_no_longer_allows_is_refused_and_recorded(
    job_and_run, researcher, settings
):
    choose(researcher, email=[], url="http://10.9.8.7/hook")  # saved when 10/8 was allowed
    job, run = job_and_run

    notify_remediation_effect(job, what="restarted", remediation=run)

    [row] = NotificationDelivery.objects.all()
    assert row.outcome == DeliveryOutcome.REFUSED
    assert "private address" in row.error and row.status_code is None


# ---------------------------------------------------------------- the page


def test_the_header_links_to_the_page_and_the_page_shows_the_choices(login, researcher):
    choose(researcher, email=["fault"], webhook=[])
    page = login(researcher).get(PAGE)

    assert page.status_code == 200
    html = page.content.decode()
    assert f'<a href="{PAGE}">Notifications</a>' in html
    assert re.search(r'<input[^>]*name="email_kinds" value="fault"[^>]*checked', html)
    assert not re.search(r'<input[^>]*name="email_kinds" value="restarted"[^>]*checked', html)
    assert "Finished after a restart" in html and "Needs my action" in html


def test_a_person_saves_their_choices(login, researcher, dns_public):
    url = "https://hooks.example.org/services/T0/B0/abc"
    form = {"email_kinds": ["fault", "action"], "webhook_kinds": ["restarted"], "webhook_url": url}

    client = login(researcher)
    response = client.post(PAGE, form)

    assert response.status_code == 302
    profile = ResearcherProfile.objects.get(user=researcher)
    assert (profile.email_kinds, profile.webhook_kinds) == (["fault", "action"], ["restarted"])
    assert (profile.webhook_url, profile.notify_email, profile.notifications_opt_out) == (
        url,
        True,
        False,
    )
    assert "Notification preferences saved" in client.get(PAGE).content.decode()


def test_unticking_every_email_box_stops_email(login, researcher, job_and_run):
    login(researcher).post(PAGE, {"webhook_kinds": ALL_KINDS, "webhook_url": ""})
    job, run = job_and_run

    notify_remediation_effect(job, what="restarted", remediation=run)

    assert mail.outbox == []
    assert ResearcherProfile.objects.get(user=researcher).notify_email is False


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://10.0.0.5/hook", "10.0.0.5 is a private address"),
        ("http://169.254.169.254/latest/meta-data/", "cloud metadata address"),
        ("http://127.0.0.1:8000/admin/", "loopback"),
        ("ftp://hooks.example.org/x", "Only http:// and https://"),
        ("not a url", "no spaces"),
        ("javascript:alert(1)", "Only http:// and https://"),
        ("http://[::1", "not a web address"),
        ("x" * 1200, "at most 1000 characters"),
    ],
)
def test_bad_addresses_are_a_form_error_next_to_the_field(login, researcher, url, message):
    response = login(researcher).post(PAGE, {"email_kinds": ["fault"], "webhook_url": url})

    assert response.status_code == 400
    html = response.content.decode()
    field = re.search(r'<input[^>]*name="webhook_url".*?</ul>', html, re.S)
    assert field is not None and 'class="errorlist"' in field.group(0)
    assert message in field.group(0).replace("&#x27;", "'")
    assert not ResearcherProfile.objects.filter(user=researcher).exists()


def test_an_unknown_kind_is_a_form_error_not_a_crash(login, researcher):
    response = login(researcher).post(PAGE, {"email_kinds": ["fault", "exploded"]})

    assert response.status_code == 400
    assert "not one of the available choices" in response.content.decode()


def test_send_a_test_records_a_delivery_and_shows_a_failure(login, researcher, settings):
    settings.MEDBAY_WEBHOOK_ALLOW = ["127.0.0.1"]
    client = login(researcher)
    location = "http://127.0.0.1:{port}/latest/meta-data/"
    with webhook_server(status=302, location=location) as server:
        saved = client.post(PAGE, {"webhook_kinds": ALL_KINDS, "webhook_url": f"{server.url}/h"})
        assert saved.status_code == 302
        response = client.post("/account/notifications/test", follow=True)

    assert [(seen.method, seen.path) for seen in server.seen] == [("POST", "/h")]
    [row] = NotificationDelivery.objects.filter(user=researcher)
    assert (row.kind, row.outcome, row.status_code) == ("test", DeliveryOutcome.FAILED, 302)
    html = response.content.decode()
    assert "The test was not delivered" in html
    assert 'id="webhook-failing"' in html and "answered 302, a redirect" in html
    assert f'id="delivery-{row.pk}" class="outcome-failed"' in html


def test_send_a_test_that_arrives_says_so(login, researcher, hook):
    client = login(researcher)
    client.post(PAGE, {"webhook_kinds": ALL_KINDS, "webhook_url": f"{hook.url}/h"})

    response = client.post("/account/notifications/test", follow=True)

    assert "Test delivered (HTTP 200)" in response.content.decode()
    [seen] = hook.seen
    assert seen.body["text"].startswith("Medbay test message")
    assert 'id="webhook-failing"' not in response.content.decode()


def test_send_a_test_without_a_webhook_says_what_to_do(login, researcher):
    response = login(researcher).post("/account/notifications/test", follow=True)

    assert "Save a webhook address first" in response.content.decode()
    assert not NotificationDelivery.objects.exists()


def test_tests_are_limited_to_a_few_a_minute(login, researcher, hook):
    client = login(researcher)
    client.post(PAGE, {"webhook_kinds": ALL_KINDS, "webhook_url": f"{hook.url}/h"})

    for _ in range(TEST_SENDS_PER_MINUTE + 1):
        response = client.post("/account/notifications/test", follow=True)

    assert len(hook.seen) == TEST_SENDS_PER_MINUTE
    assert "tests a minute" in response.content.decode()


def test_a_person_sees_only_their_own_deliveries(login, researcher, other_researcher):
    NotificationDelivery.objects.create(
        user=other_researcher,
        kind="restarted",
        channel="email",
        destination="bob@example.org",
        outcome="failed",
        error="bob's mail server is down",
    )

    html = login(researcher).get(PAGE).content.decode()

    assert "bob@example.org" not in html and "Nothing sent yet" in html
