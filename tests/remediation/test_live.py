"""The timeline's live fragments: what open pages receive when a run moves."""

import pytest

from clusters.models import Node
from core import live
from remediation import actions, services
from remediation.models import Mode, RemediationStep, StepOutcome, Trigger


@pytest.fixture
def sent(monkeypatch):
    events: list[tuple[str, dict]] = []
    monkeypatch.setattr(live, "send_events", events.extend)
    return events


def remediation_pokes(sent) -> list[list[str]]:
    return [
        event["regions"]
        for group, event in sent
        if group == live.REMEDIATION_GROUP and event["type"] == "live.poke"
    ]


def test_a_step_pokes_its_runs_page_which_shows_each_step_once(
    synced, sent, django_capture_on_commit_callbacks, web, admin_user
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
        services.publish_step(step)

    assert remediation_pokes(sent)[-1] == [f"run-{run.pk}"]
    page = web(admin_user).get(f"/remediation/{run.pk}/").content.decode()
    assert page.count(f'id="step-{step.pk}"') == 1
    assert "Succeeded" in page and f'data-live-region="run-{run.pk}"' in page


def test_a_decision_pokes_the_lists_and_the_run_whose_page_drops_its_approve_form(
    admin_user, second_admin, synced, sent, django_capture_on_commit_callbacks, web
):
    run = services.create_run(
        Node.objects.get(name="gpu-02"),
        "reboot",
        trigger=Trigger.POLICY,
        reason="XID 48",
        mode=Mode.APPROVAL,
    )
    page = web(admin_user).get(f"/remediation/{run.pk}/").content.decode()
    assert "Approve</button>" in page
    with django_capture_on_commit_callbacks(execute=True):
        actions.approve(run, second_admin, "ok")

    assert ["run-" + str(run.pk), "runs"] in remediation_pokes(sent)
    page = web(admin_user).get(f"/remediation/{run.pk}/").content.decode()
    assert "Approve</button>" not in page and "Reject</button>" not in page
