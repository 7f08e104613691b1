"""A run in needs_attention is retried from the step that stopped it, or cancelled
with its node released; both from the run page and the API."""

from __future__ import annotations

import pytest

from clusters.models import Node, Partition
from remediation.engine import Engine
from remediation.models import Action, Remediation, Trigger
from remediation.services import create_run
from remediation.transitions import RunStatus
from tests.remediation.conftest import drive

pytestmark = pytest.mark.django_db
RUNS = "/api/v1/remediations/"


@pytest.fixture
def stuck(sim, synced, admin_user):
    """A replace of gpu-02 stopped at check_eligibility: every spare is busy."""
    Partition.objects.update(checkpoint_grace_s=0)
    for spare in ("gpu-06", "gpu-07"):
        sim.drain_node(spare, "medbay-test: spare lent out")
    synced()
    run = create_run(
        Node.objects.get(name="gpu-02"), Action.REPLACE, trigger=Trigger.ADMIN,
        reason="fan failure", requested_by=admin_user, context={"verify_after_s": 0},
    )  # fmt: skip
    engine = Engine("test-worker", backend=sim, fleet=sim)
    drive(engine, sim, synced)
    run.refresh_from_db()
    assert run.status == RunStatus.NEEDS_ATTENTION
    assert run.step_name == "check_eligibility"
    assert "Add or free a spare, then retry this run" in run.message
    return run, engine


def test_a_run_retried_after_a_spare_is_freed_finishes(stuck, sim, synced, api, admin_user):
    run, engine = stuck
    sim.resume_node("gpu-06")
    synced()

    response = api(admin_user).post(f"{RUNS}{run.pk}/retry/", {"comment": "freed"}, format="json")

    assert response.status_code == 200, response.json()
    assert response.json()["status"] == RunStatus.RUNNING
    drive(engine, sim, synced)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.message
    assert run.context["replacement"] == "gpu-06"
    retried = run.status_changes.get(from_status=RunStatus.NEEDS_ATTENTION)
    assert retried.message == "Retried by admin from step check_eligibility: freed"
    assert retried.actor == "admin"


def test_only_a_run_that_needs_attention_can_be_retried(admin_user, api, synced):
    run = create_run(
        Node.objects.get(name="gpu-03"), Action.DRAIN, trigger=Trigger.ADMIN, reason="x"
    )
    response = api(admin_user).post(f"{RUNS}{run.pk}/retry/", {}, format="json")
    assert response.status_code == 409


def test_researchers_may_not_retry(stuck, api, researcher):
    run, _ = stuck
    assert api(researcher).post(f"{RUNS}{run.pk}/retry/", {}, format="json").status_code == 403


def test_the_run_page_previews_the_rest_of_the_plan_and_offers_retry(stuck, web, admin_user):
    run, _ = stuck
    page = web(admin_user).get(f"/remediation/{run.pk}/").content.decode()

    assert "Retry from check_eligibility" in page
    assert "Cancel and release gpu-02" in page
    assert 'class="impact"' in page


def test_retrying_from_the_run_page_redirects_to_the_run(stuck, sim, synced, web, admin_user):
    run, _ = stuck
    sim.resume_node("gpu-06")
    synced()

    response = web(admin_user).post(f"/remediation/{run.pk}/retry/", {"comment": ""})

    assert response.status_code == 302
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING


def test_cancel_and_release_gives_the_node_back_through_an_uncordon_run(
    stuck, sim, synced, api, admin_user
):
    run, engine = stuck

    response = api(admin_user).post(
        f"{RUNS}{run.pk}/release/", {"comment": "no spare this week"}, format="json"
    )

    assert response.status_code == 200, response.json()
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    release = Remediation.objects.get(pk=response.json()["id"])
    assert (release.action, release.status) == (Action.UNCORDON, RunStatus.RUNNING)
    drive(engine, sim, synced)
    release.refresh_from_db()
    assert release.status == RunStatus.SUCCEEDED
    assert not {n.name: n for n in sim.nodes()}["gpu-02"].flags & {"drain", "fail"}
