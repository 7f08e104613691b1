from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from django.core import mail

from jobs.models import Job, ResearcherProfile
from jobs.notifications import notify_remediation_effect

pytestmark = pytest.mark.django_db


@pytest.fixture
def webhook(settings):
    # Webhooks reach only the public internet unless the site allows more.
    settings.MEDBAY_WEBHOOK_ALLOW = ["127.0.0.1"]
    received = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers["Content-Length"])
            received.append(json.loads(self.rfile.read(length)))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            """Keep the test output quiet."""

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/hook", received
    server.shutdown()


def test_the_owner_is_emailed_when_remediation_requeued_their_job(job_and_run):
    job, run = job_and_run

    notify_remediation_effect(job, what="requeued", remediation=run)

    [message] = mail.outbox
    assert message.to == ["alice@example.org"]
    assert "Job 1234 (llm) was requeued" in message.subject
    assert "replace of gpu-02" in message.body
    assert "XID 79 on GPU 3" in message.body
    assert "/jobs/test/1234/" in message.body


def test_a_configured_webhook_gets_slack_compatible_text(job_and_run, researcher, webhook):
    url, received = webhook
    ResearcherProfile.objects.create(user=researcher, webhook_url=url, notify_email=False)
    job, run = job_and_run

    notify_remediation_effect(job, what="restarted", remediation=run)

    assert mail.outbox == []
    [payload] = received
    assert set(payload) == {"text"}
    assert "Job 1234 (llm) restarted" in payload["text"]


def test_an_opted_out_researcher_gets_nothing(job_and_run, researcher, webhook):
    url, received = webhook
    ResearcherProfile.objects.create(user=researcher, webhook_url=url, notifications_opt_out=True)
    job, run = job_and_run

    notify_remediation_effect(job, what="cancelled", remediation=run)

    assert mail.outbox == []
    assert received == []


def test_an_unreachable_webhook_is_logged_not_raised(job_and_run, researcher, caplog, settings):
    settings.MEDBAY_WEBHOOK_ALLOW = ["127.0.0.1"]
    ResearcherProfile.objects.create(user=researcher, webhook_url="http://127.0.0.1:9/hook")
    job, run = job_and_run

    notify_remediation_effect(job, what="signalled", remediation=run)

    assert len(mail.outbox) == 1
    assert "not delivered" in caplog.text


def test_the_owner_is_found_through_the_unix_user_mapping(job_and_run, other_researcher):
    other_researcher.email = "bob@example.org"
    other_researcher.save()
    ResearcherProfile.objects.create(user=other_researcher, unix_user="bsmith")
    job, run = job_and_run
    Job.objects.filter(pk=job.pk).update(user="bsmith")
    job.refresh_from_db()

    notify_remediation_effect(job, what="requeued", remediation=run)

    assert [m.to for m in mail.outbox] == [["bob@example.org"]]


def test_an_unknown_effect_is_a_caller_bug(job_and_run):
    job, run = job_and_run

    with pytest.raises(ValueError, match="what must be one of"):
        notify_remediation_effect(job, what="exploded", remediation=run)
