"""A storm's incidents are decided many at a time: one pass, one read of the breaker.

Each report's request decides the incidents waiting in its cluster under the cluster's
lock; a request that finds the lock taken leaves its incidents to the pass that holds
it, and the engine's workers sweep up any that arrive just as a pass ends.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from clusters.models import Cluster
from core import live
from health import ingest
from health.models import Incident
from remediation import admission
from remediation.engine import Engine
from remediation.models import BreakerRefusal, BreakerTrip, Remediation
from tests.remediation.conftest import ingest_xid
from tests.waiting import wait_for


def train_nodes(sim) -> list[str]:
    return sorted(info.name for info in sim.nodes() if "train" in info.partitions)


def report_without_deciding(names, django_capture_on_commit_callbacks) -> list[int]:
    """XID 79s stored as a storm's reports are, their decisions not yet made."""
    with django_capture_on_commit_callbacks(execute=False):
        return [ingest_xid(name, 79).incident_ids[0] for name in names]


def decided_exactly_once(incident_ids) -> bool:
    runs = list(Remediation.objects.values_list("incident_id", flat=True))
    refused = list(BreakerRefusal.objects.values_list("incident_id", flat=True))
    return sorted(runs + refused) == sorted(incident_ids)


def not_savepoints(captured) -> list[str]:
    # Each incident gets a savepoint of its own (one failure spares the others' decisions).
    return [q["sql"] for q in captured if "SAVEPOINT" not in q["sql"].upper()]


def test_one_report_decides_every_waiting_incident_of_its_cluster_in_one_pass(
    big_sim, django_capture_on_commit_callbacks
):
    names = train_nodes(big_sim)
    waiting = report_without_deciding(names[:-1], django_capture_on_commit_callbacks)
    assert Incident.objects.filter(decision_due=True).count() == 19
    assert not Remediation.objects.exists()

    with django_capture_on_commit_callbacks(execute=True):
        last = ingest_xid(names[-1], 79).incident_ids[0]

    assert decided_exactly_once([*waiting, last])
    assert Remediation.objects.count() == 2
    assert BreakerTrip.objects.get().suppressed == 18
    assert not Incident.objects.filter(decision_due=True).exists()
    # In arrival order: the first two reports got the nodes the breaker allows.
    assert set(Remediation.objects.values_list("incident_id", flat=True)) == set(waiting[:2])


def test_a_pass_reads_the_breaker_once_however_many_incidents_it_refuses(
    big_sim, django_capture_on_commit_callbacks
):
    names = train_nodes(big_sim)
    first = report_without_deciding(names[:4], django_capture_on_commit_callbacks)
    admission.on_incidents(first)  # two runs, two refusals: the breaker is now open
    counts = []
    for group in (names[4:8], names[8:20]):
        ids = report_without_deciding(group, django_capture_on_commit_callbacks)
        with CaptureQueriesContext(connection) as captured:
            admission.on_incidents(ids[:1])
        first += ids
        assert decided_exactly_once(first)
        counts.append(len(not_savepoints(captured)))
    assert BreakerRefusal.objects.count() == 18
    # 4 refusals, then 12: the same queries.
    assert counts[0] == counts[1], counts


def test_an_incident_that_grew_a_new_xid_while_waiting_is_decided_on_all_of_them(
    big_sim, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):
        ingest_xid("gpu-02", 31)
        grown = ingest_xid("gpu-02", 48).incident_ids[0]
    (decision,) = admission.on_incidents([grown])
    run = Remediation.objects.get()
    assert run.incident_id == grown and decision.xid == 48
    assert sorted(run.context["xids"]) == [31, 48]
    assert not Incident.objects.filter(decision_due=True).exists()


def test_a_pass_decides_only_its_own_clusters_waiting_incidents(
    big_sim, django_capture_on_commit_callbacks
):
    from clusters.backends.simulated import SimulatedCluster
    from sync.cycle import apply_snapshot

    other = SimulatedCluster.standard(train=20, infer=0, spare=2, prefix="other", seed=4)
    elsewhere = Cluster.objects.create(name="elsewhere", backend="simulated")
    apply_snapshot(elsewhere, other.partitions(), other.nodes(), other.jobs())
    theirs = report_without_deciding(train_nodes(other)[:3], django_capture_on_commit_callbacks)
    ours = report_without_deciding(train_nodes(big_sim)[:3], django_capture_on_commit_callbacks)

    admission.on_incidents(ours[:1])

    assert decided_exactly_once(ours)
    assert Incident.objects.filter(pk__in=theirs, decision_due=True).count() == 3
    admission.decide_due()  # the engine's sweep: their own cluster's pass
    assert decided_exactly_once([*ours, *theirs])


class RecordingLayer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict]] = []

    async def group_send(self, group, message):
        self.sent.append((group, message))


@pytest.mark.django_db(transaction=True)
def test_a_pass_that_starts_many_runs_sends_their_nodes_tiles_from_one_read(
    big_sim, settings, monkeypatch
):
    # The breaker lets every run of the storm through: each one changes its node's tile.
    settings.MEDBAY_BREAKER_MAX_NODES = 20
    settings.MEDBAY_BREAKER_PARTITION_PCT = 100
    layer = RecordingLayer()
    monkeypatch.setattr(live, "get_channel_layer", lambda: layer)
    names = train_nodes(big_sim)
    reads = []
    for group in (names[:4], names[4:16]):
        with monkeypatch.context() as storing:  # stored, their decisions not yet made
            storing.setattr(ingest, "incident_listeners", [])
            ids = [ingest_xid(name, 79).incident_ids[0] for name in group]
        layer.sent.clear()
        with CaptureQueriesContext(connection) as captured:
            admission.on_reported(ids[-1:])

        assert Remediation.objects.filter(incident__in=ids).count() == len(group)
        tiles = [m["html"] for g, m in layer.sent if g == live.BOARD_GROUP and "html" in m]
        assert len(tiles) == 1, tiles
        assert all(f'id="node-{name}"' in tiles[0] for name in group)
        reads.append(sum('FROM "clusters_gpu"' in query["sql"] for query in captured))
    # 4 runs, then 12: their nodes' GPUs read in the same number of queries.
    assert reads[0] == reads[1] >= 1, reads


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("postgres_only")
class TestOnPostgreSQL:
    def test_a_report_that_finds_a_pass_under_way_leaves_its_incident_to_the_sweep(
        self, big_sim, cluster, django_capture_on_commit_callbacks
    ):
        holding, release = threading.Event(), threading.Event()

        def another_pass():
            with transaction.atomic():
                Cluster.objects.select_for_update().get(pk=cluster.pk)
                holding.set()
                release.wait(30)
            connection.close()

        holder = threading.Thread(target=another_pass)
        holder.start()
        assert holding.wait(10)
        try:
            with django_capture_on_commit_callbacks(execute=True):
                incident = ingest_xid("gpu-03", 79).incident_ids[0]
            # The agent was answered at once; its incident waits for the pass.
            assert not Remediation.objects.exists()
            assert Incident.objects.get(pk=incident).decision_due
        finally:
            release.set()
            holder.join(10)

        stop = threading.Event()
        worker = threading.Thread(
            target=lambda: (
                Engine("sweeper", backend=big_sim, fleet=big_sim).run_forever(
                    interval=0.05, stop=stop
                ),
                connection.close(),
            )
        )
        worker.start()
        try:
            wait_for(
                lambda: Remediation.objects.filter(incident_id=incident).exists(),
                timeout_s=30,
                what="the engine's sweep deciding the waiting incident",
            )
        finally:
            stop.set()
            worker.join(30)
        assert not Incident.objects.get(pk=incident).decision_due

    def test_reports_racing_from_many_requests_are_each_decided_exactly_once(
        self, big_sim, django_capture_on_commit_callbacks
    ):
        names = train_nodes(big_sim)
        barrier = threading.Barrier(len(names))
        incidents: list[int] = []

        def report(name):
            try:
                barrier.wait(10)
                with transaction.atomic():
                    result = ingest_xid(name, 79)
                admission.on_reported(result.incident_ids)
                incidents.extend(result.incident_ids)
            finally:
                connection.close()

        threads = [threading.Thread(target=report, args=(name,)) for name in names]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        admission.decide_due()  # the engine's sweep, for any that arrived as a pass ended

        assert len(incidents) == 20
        assert decided_exactly_once(incidents)
        assert Remediation.objects.count() == 2
        assert BreakerTrip.objects.get().suppressed == 18
        assert not Incident.objects.filter(decision_due=True).exists()
