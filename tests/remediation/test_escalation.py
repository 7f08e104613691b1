"""A more drastic fault supersedes a milder active run; an equal or milder one joins it."""

from __future__ import annotations

import pytest

from remediation import policies
from remediation.models import Action, Remediation
from remediation.transitions import RunStatus
from tests.remediation.conftest import ingest_xid

pytestmark = pytest.mark.django_db


def ingest(name, xid, gpu, capture):
    with capture(execute=True):
        ingest_xid(name, xid, gpu=gpu)


def test_an_xid_48_after_a_pending_xid_31_run_supersedes_it(
    synced, django_capture_on_commit_callbacks
):
    ingest("gpu-02", 31, 1, django_capture_on_commit_callbacks)
    milder = Remediation.objects.get()
    assert (milder.action, milder.status) == (Action.RESTART_APP, RunStatus.AWAITING_APPROVAL)

    ingest("gpu-02", 48, 4, django_capture_on_commit_callbacks)

    milder.refresh_from_db()
    drastic = Remediation.objects.exclude(pk=milder.pk).get()
    assert drastic.action in (Action.RESET_GPU, Action.REPLACE)
    assert drastic.status == RunStatus.AWAITING_APPROVAL  # under its own policy
    assert milder.status == RunStatus.CANCELLED
    assert milder.superseded_by == drastic
    assert milder.message.startswith(f"superseded by run {drastic.pk}: XID 48 GPU 4")
    cancel = milder.status_changes.get(to_status=RunStatus.CANCELLED)
    assert f"run {drastic.pk}" in cancel.message
    assert drastic.context["supersedes"] == milder.pk


def test_an_xid_48_that_grows_the_same_incident_as_the_xid_31_still_escalates(
    synced, django_capture_on_commit_callbacks
):
    ingest("gpu-02", 31, 3, django_capture_on_commit_callbacks)
    ingest("gpu-02", 48, 3, django_capture_on_commit_callbacks)

    statuses = dict(Remediation.objects.values_list("action", "status"))
    assert statuses[Action.RESTART_APP] == RunStatus.CANCELLED
    assert len(statuses) == 2 and RunStatus.AWAITING_APPROVAL in statuses.values()


def test_an_equal_or_milder_fault_joins_the_active_run_and_says_so(
    synced, django_capture_on_commit_callbacks
):
    ingest("gpu-02", 48, 4, django_capture_on_commit_callbacks)
    run = Remediation.objects.get()
    with django_capture_on_commit_callbacks(execute=True):
        result = ingest_xid("gpu-02", 31, gpu=1)
    decisions = policies.on_incidents(result.incident_ids)

    assert Remediation.objects.count() == 1
    run.refresh_from_db()
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert result.incident_ids[0] in run.context["joined_incidents"]
    note = run.status_changes.order_by("-id").first()
    assert note.message.startswith(f"joined by incident {result.incident_ids[0]}: XID 31")
    assert decisions[0].outcome == "already handled" or decisions[0].outcome.startswith(
        f"joined run {run.pk}"
    )


def test_a_quarantine_is_never_superseded(synced, django_capture_on_commit_callbacks):
    from remediation.services import create_run

    node = synced and __import__("clusters.models", fromlist=["Node"]).Node.objects.get(
        name="gpu-02"
    )
    quarantine = create_run(
        node, Action.DRAIN, trigger="health_event", reason="flapping", steps=["quarantine"]
    )
    ingest("gpu-02", 79, 3, django_capture_on_commit_callbacks)

    quarantine.refresh_from_db()
    assert quarantine.status == RunStatus.RUNNING
    assert Remediation.objects.count() == 1
