"""The engine cannot be wedged: one incident that fails to be decided never stops the
decisions about the others, and a breaker trip and its refusals commit together."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, transaction
from django.utils import timezone

from clusters.models import Node
from health.models import Incident
from remediation import admission, safety
from remediation.models import Action, BreakerRefusal, BreakerTrip, Remediation, Trigger
from remediation.services import create_run
from tests.remediation.conftest import ingest_xid


def admin_drain(name: str) -> Remediation:
    return create_run(
        Node.objects.get(name=name), Action.DRAIN, trigger=Trigger.ADMIN, reason="by hand"
    )


@pytest.mark.django_db(transaction=True)
def test_an_xid_on_a_node_an_admin_drained_at_the_breakers_limit_wedges_nothing(big_sim):
    # The train partition's limit is 2 of 20: the admin's drains go past it (hers are
    # never blocked), so a replace of one of her nodes is refused even once it is cancelled.
    drains = [admin_drain(name) for name in ("gpu-01", "gpu-02", "gpu-03")]

    ingest_xid("gpu-01", 79)  # a replace would supersede the admin's drain: refused
    ingest_xid("gpu-05", 48, gpu=1)  # an unrelated fault, decided all the same

    assert not Incident.objects.filter(decision_due=True).exists()
    trip = BreakerTrip.objects.get()
    refusals = BreakerRefusal.objects.filter(trip=trip)
    assert {r.node.name for r in refusals} >= {"gpu-01"}
    # The admin's drain goes on: the refused replace cancelled nothing.
    for drain in drains:
        drain.refresh_from_db()
        assert drain.is_active
    assert Remediation.objects.filter(node__name="gpu-05").exists()


def corrupt(incident_id: int) -> None:
    """A record no decision can be made from (an XID that is not a number)."""
    Incident.objects.filter(pk=incident_id).update(xids=[{"not": "an xid"}], decision_due=True)


def back_off_over(incident_id: int) -> None:
    Incident.objects.filter(pk=incident_id).update(decide_after=timezone.now())


@pytest.mark.django_db(transaction=True)
def test_an_incident_whose_decision_fails_is_retried_then_shown_undecidable_and_the_rest_go_on(
    big_sim, client, admin_user
):
    with transaction.atomic():  # corrupted before its decision, made after commit
        bad = ingest_xid("gpu-01", 48, gpu=0).incident_ids[0]
        corrupt(bad)
    for attempt in range(1, admission.MAX_DECISION_FAILURES + 1):
        good = ingest_xid(f"gpu-{attempt + 1:02d}", 48, gpu=1).incident_ids[0]
        # The good incident is decided; the bad one is counted and waits out its backoff.
        assert Remediation.objects.filter(incident_id=good).exists()
        incident = Incident.objects.get(pk=bad)
        assert incident.decision_failures == attempt
        if attempt < admission.MAX_DECISION_FAILURES:
            assert incident.decision_due and incident.decide_after > timezone.now()
            assert admission.decide_due() == 0  # still backing off: not tried again
            back_off_over(bad)
    assert not incident.decision_due
    assert incident.decision_error.startswith("could not be decided: TypeError")
    assert not Remediation.objects.filter(incident_id=bad).exists()

    client.force_login(admin_user)
    queue = client.get("/remediation/approvals/").content.decode()
    assert "Incidents that could not be decided" in queue
    assert f"incident {bad} opened" in queue and "could not be decided: TypeError" in queue
    node_page = client.get("/nodes/gpu-01/", follow=True).content.decode()
    assert "could not be decided: TypeError" in node_page

    # Once the record is fixed, "try again" decides it.
    Incident.objects.filter(pk=bad).update(xids=[48])
    answer = client.post(f"/remediation/incidents/{bad}/decide-again/")
    assert answer.status_code == 302
    assert Remediation.objects.filter(incident_id=bad).exists()
    assert Incident.objects.get(pk=bad).decision_error == ""
    assert f"undecidable-{bad}" not in client.get("/remediation/approvals/").content.decode()


@pytest.mark.django_db(transaction=True)
def test_a_pass_that_fails_as_a_whole_decides_its_incidents_one_by_one(big_sim, monkeypatch):
    """A failure the savepoints cannot catch (at COMMIT, say) isolates its incident."""
    poisoned = set()
    flush = safety.BreakerLedger.flush

    def failing_flush(ledger):
        flush(ledger)
        if poisoned & ledger.node_ids:
            raise DatabaseError("deferred constraint failed at COMMIT")

    monkeypatch.setattr(safety.BreakerLedger, "flush", failing_flush)
    with transaction.atomic():  # stored together, decided in one pass after commit
        ids = [ingest_xid(f"gpu-{n:02d}", 48, gpu=1).incident_ids[0] for n in (4, 5, 6)]
    assert not Incident.objects.filter(decision_due=True).exists()

    poisoned.add(Node.objects.get(name="gpu-08").pk)
    with transaction.atomic():
        more = [ingest_xid(f"gpu-{n:02d}", 48, gpu=1).incident_ids[0] for n in (8, 9)]
    assert Remediation.objects.filter(incident_id__in=[*ids, more[1]]).count() == 4
    failed = Incident.objects.get(pk=more[0])
    assert failed.decision_failures == 1 and failed.decision_due
    assert not Remediation.objects.filter(incident_id=more[0]).exists()
