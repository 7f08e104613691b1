"""A more drastic fault supersedes a milder active run; an equal or milder one joins it."""

from __future__ import annotations

import pytest

from remediation import admission
from remediation.models import Action, Remediation, RemediationStatusChange
from remediation.transitions import RunStatus
from tests.remediation.conftest import ingest_xid, job_running_on

pytestmark = pytest.mark.django_db


def ingest(name, xid, gpu, capture):
    with capture(execute=True):
        ingest_xid(name, xid, gpu=gpu)


def test_an_xid_48_after_a_pending_xid_31_run_supersedes_it(
    synced, django_capture_on_commit_callbacks
):
    job_running_on("gpu-02")
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
    job_running_on("gpu-02")
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
    decisions = admission.on_incidents(result.incident_ids)

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


def history():
    """Every history row as it stands: (id, run, from, to, message, actor, when)."""
    return list(
        RemediationStatusChange.objects.order_by("id").values_list(
            "id", "remediation_id", "from_status", "to_status", "message", "actor", "at"
        )
    )


def test_joining_and_superseding_only_ever_add_history_rows(
    synced, django_capture_on_commit_callbacks
):
    job_running_on("gpu-02")
    ingest("gpu-02", 31, 1, django_capture_on_commit_callbacks)
    before_join = history()
    ingest("gpu-02", 13, 2, django_capture_on_commit_callbacks)  # as mild: joins
    after_join = history()
    ingest("gpu-02", 48, 4, django_capture_on_commit_callbacks)  # more drastic: supersedes
    after_supersede = history()

    assert after_join[: len(before_join)] == before_join
    assert len(after_join) == len(before_join) + 1
    assert after_join[-1][4].startswith("joined by incident")
    assert after_supersede[: len(after_join)] == after_join
    milder = Remediation.objects.get(action=Action.RESTART_APP)
    cancel = [row for row in after_supersede[len(after_join) :] if row[1] == milder.pk]
    assert [(row[2], row[3]) for row in cancel] == [
        (RunStatus.AWAITING_APPROVAL, RunStatus.CANCELLED)
    ]
    assert cancel[0][4].startswith(f"superseded by run {milder.superseded_by_id}: XID 48")


def test_a_supersede_the_breaker_refuses_leaves_the_milder_run_and_its_history_as_they_were(
    big_sim, django_capture_on_commit_callbacks
):
    from remediation.models import BreakerRefusal, Mode, Policy

    # Automatic drains: the breaker allows two of the twenty training nodes at once.
    Policy.objects.create(xid=31, action=Action.RESTART_APP, mode=Mode.APPROVAL)
    Policy.objects.create(xid=48, action=Action.REPLACE, mode=Mode.AUTOMATIC)
    for name in ("gpu-01", "gpu-02"):
        ingest(name, 48, 4, django_capture_on_commit_callbacks)
    job_running_on("gpu-03")
    ingest("gpu-03", 31, 1, django_capture_on_commit_callbacks)
    milder = Remediation.objects.get(node__name="gpu-03")
    before = history()

    ingest("gpu-03", 48, 4, django_capture_on_commit_callbacks)

    milder.refresh_from_db()
    assert milder.status == RunStatus.AWAITING_APPROVAL and milder.superseded_by_id is None
    assert Remediation.objects.filter(node__name="gpu-03").count() == 1
    assert BreakerRefusal.objects.filter(node__name="gpu-03", action=Action.REPLACE).exists()
    assert history() == before


def test_a_restart_of_jobs_on_a_node_running_none_asks_no_one_and_says_why(
    synced, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        result = ingest_xid("gpu-02", 31, gpu=1)

    [decision] = admission.on_incidents(result.incident_ids)

    assert not Remediation.objects.exists()  # nothing to approve, nothing waiting
    assert decision.action == Action.RESTART_APP
    assert decision.outcome == "nothing to do: no jobs running on gpu-02 to restart"
