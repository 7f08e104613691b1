"""The timeline's live fragments: what open pages receive when a run moves."""

import pytest

from clusters.models import Node
from clusters.remediation import actions, services
from clusters.remediation.models import Mode, RemediationStep, StepOutcome, Trigger
from portal import live


@pytest.fixture
def sent(monkeypatch):
    messages: list[tuple[str, str]] = []
    monkeypatch.setattr(live, "send_html", lambda group, html: messages.append((group, html)))
    return messages


def remediation_html(sent) -> list[str]:
    return [html for group, html in sent if group == live.REMEDIATION_GROUP]


def test_a_step_published_twice_replaces_its_row_instead_of_adding_one(
    synced, sent, django_capture_on_commit_callbacks
):
    run = services.create_run(
        Node.objects.get(name="gpu-02"), "drain", trigger=Trigger.ADMIN, reason="test"
    )
    with django_capture_on_commit_callbacks(execute=True):
        step = RemediationStep.objects.create(
            remediation=run, index=0, name="drain", outcome=StepOutcome.STARTED
        )
        services.publish_step(step)
    with django_capture_on_commit_callbacks(execute=True):
        RemediationStep.objects.filter(pk=step.pk).update(outcome=StepOutcome.SUCCEEDED)
        step.outcome = StepOutcome.SUCCEEDED
        services.publish_step(step)
    last = remediation_html(sent)[-1]
    assert last.startswith(f'<tbody id="run-{run.pk}-steps" hx-swap-oob="true">')
    assert last.count(f'id="step-{step.pk}"') == 1
    assert "Succeeded" in last and "Started" not in last


def test_a_decision_updates_the_status_on_open_pages(
    admin_user, second_admin, synced, sent, django_capture_on_commit_callbacks
):
    run = services.create_run(
        Node.objects.get(name="gpu-02"),
        "reboot",
        trigger=Trigger.POLICY,
        reason="XID 48",
        mode=Mode.APPROVAL,
    )
    with django_capture_on_commit_callbacks(execute=True):
        actions.approve(run, second_admin, "ok")
    status = [html for html in remediation_html(sent) if f'id="run-{run.pk}-status"' in html]
    assert status and "Running" in status[-1] and 'hx-swap-oob="true"' in status[-1]
