"""Chaos: a storm while an admin's drains hold a partition past the breaker's limit.

The storm benchmark's mix (every GPU of every node reports XID 79, agents sending from
several threads at once, some batches twice) arrives after an admin drained three
training nodes by hand, one more than the partition's breaker allows automation. Every
decision that would supersede her drains is refused, and once that refusal opened a trip
that its savepoint rolled back, every later pass failed at COMMIT: the cluster stopped
healing. Now every incident must end decided (a run, a joined run, a refusal) or visibly
undecidable, and nothing may stay waiting.
"""

from __future__ import annotations

import threading

import pytest
from django.db import close_old_connections, connection

from clusters.models import Node
from health.models import Incident
from remediation import admission
from remediation.engine import Engine
from remediation.models import Action, BreakerRefusal, Remediation, Trigger
from remediation.services import create_run
from remediation.transitions import RunStatus
from tests.chaos.test_xid_storm import GPUS, send, storm_batches

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
SENDERS = 4


def report_from_threads(batches: dict[str, list[list[dict]]]) -> None:
    """Each sender thread plays some nodes' agents, each batch sent (and its last one
    retried) as an agent would; on SQLite, which has no row locks, one thread."""
    names = sorted(batches)
    senders = SENDERS if connection.vendor == "postgresql" else 1
    failures: list[BaseException] = []

    def agent(mine: list[str]) -> None:
        try:
            for name in mine:
                for events in batches[name]:
                    send(name, events)
                send(name, batches[name][-1])
        except BaseException as error:  # reported by the test, not lost in the thread
            failures.append(error)
        finally:
            close_old_connections()

    threads = [threading.Thread(target=agent, args=(names[i::senders],)) for i in range(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads)
    assert not failures, failures


def accounted_for() -> tuple[set[int], set[int]]:
    """(incidents with a run, a joined run or a refusal; incidents shown undecidable)."""
    decided = set(Remediation.objects.exclude(incident=None).values_list("incident_id", flat=True))
    decided |= set(
        BreakerRefusal.objects.exclude(incident=None).values_list("incident_id", flat=True)
    )
    for context in Remediation.objects.values_list("context", flat=True):
        decided |= set(context.get("joined_incidents") or [])
    undecidable = set(Incident.objects.exclude(decision_error="").values_list("pk", flat=True))
    return decided, undecidable


def test_a_storm_after_admin_drains_past_the_breakers_limit_leaves_every_incident_decided(
    storm_sim,
):
    drained_by_hand = ["gpu-01", "gpu-02", "gpu-03"]  # the train partition's limit is 2
    for name in drained_by_hand:
        create_run(
            Node.objects.get(name=name), Action.DRAIN, trigger=Trigger.ADMIN, reason="by hand"
        )
    names = sorted(info.name for info in storm_sim.nodes())

    report_from_threads(storm_batches(names))
    admission.decide_due()  # the engine's sweep, as its worker runs it before each pass
    Engine("storm", backend=storm_sim, fleet=storm_sim).run_once()

    assert Incident.objects.count() == len(names) * GPUS
    assert not Incident.objects.filter(decision_due=True).exists()
    decided, undecidable = accounted_for()
    everything = set(Incident.objects.values_list("pk", flat=True))
    assert everything == decided | undecidable
    assert not undecidable  # nothing in this storm is a bad record
    # The admin's drains were refused a takeover, not cancelled: her nodes stay hers.
    for name in drained_by_hand:
        run = Remediation.objects.get(node__name=name, trigger=Trigger.ADMIN)
        assert run.superseded_by_id is None and run.status != RunStatus.CANCELLED, run.message
    refused = BreakerRefusal.objects.filter(node__name__in=drained_by_hand)
    assert refused.exists()
    assert all(refusal.trip_id for refusal in refused)
