"""/metrics: how fast Medbay heals, and what waits for a person, read from the history."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from clusters.models import Cluster, Node, NodePool, NodeStateChange, PoolKind
from health.models import FaultGroup, Incident, NodeToken
from jobs.models import Job, JobStateChange
from remediation.models import BreakerRefusal, BreakerTrip, Remediation, RemediationJob
from remediation.models import RemediationStatusChange as StatusChange
from tests.portal.test_metrics import scrape

OOS = "medbay_fault_to_out_of_service_seconds"
RUNNING = "medbay_fault_to_job_running_seconds"
DECIDED = "medbay_incident_to_decision_seconds"


def incident(node, at, **fields):
    return Incident.objects.create(
        node=node, opened_at=at, last_event_at=at, severity="critical", **fields
    )


@pytest.fixture
def fault(synced):
    """gpu-01's incident 10 minutes ago, decided by a replace run 40 s later."""
    node = Node.objects.get(name="gpu-01")
    at = timezone.now() - timedelta(minutes=10)
    found = incident(node, at)
    run = Remediation.objects.create(
        node=node,
        action="replace",
        trigger="health_event",
        reason="XID 79",
        incident=found,
        status="running",
        created_at=at + timedelta(seconds=40),
    )
    return node, at, run


def test_time_to_out_of_service_counts_the_first_drain_after_the_fault(fault):
    node, at, run = fault
    NodeStateChange.objects.create(node=node, to_status="draining", at=at - timedelta(hours=1))
    NodeStateChange.objects.create(node=node, to_status="draining", at=at + timedelta(seconds=70))
    NodeStateChange.objects.create(node=node, to_status="drained", at=at + timedelta(seconds=200))

    samples = scrape()

    assert samples[f'{OOS}_count{{cluster="test"}}'] == 1
    assert samples[f'{OOS}_sum{{cluster="test"}}'] == pytest.approx(70)
    assert samples[f'{OOS}_bucket{{cluster="test",le="60"}}'] == 0
    assert samples[f'{OOS}_bucket{{cluster="test",le="120"}}'] == 1
    assert samples[f'{DECIDED}_sum{{cluster="test"}}'] == pytest.approx(40)


def test_a_cluster_without_faults_has_zero_series_so_rate_sees_the_first(synced):
    samples = scrape()

    assert samples[f'{OOS}_count{{cluster="test"}}'] == 0
    assert samples[f'{RUNNING}_bucket{{cluster="test",le="+Inf"}}'] == 0


def test_a_drain_after_the_run_ended_is_not_its_time_to_out_of_service(fault):
    node, at, run = fault
    Remediation.objects.filter(pk=run.pk).update(
        status="succeeded", finished_at=at + timedelta(seconds=50)
    )
    NodeStateChange.objects.create(node=node, to_status="drained", at=at + timedelta(hours=3))

    assert scrape()[f'{OOS}_count{{cluster="test"}}'] == 0


def test_time_to_running_again_is_per_job_the_run_requeued(fault):
    node, at, run = fault
    cluster = Cluster.objects.get(name="test")
    for slurm_id, back_after in ((501, 300), (502, 900)):
        job = Job.objects.create(cluster=cluster, slurm_id=slurm_id, state="RUNNING")
        requeued = at + timedelta(seconds=120)
        RemediationJob.objects.create(
            remediation=run, slurm_job_id=slurm_id, effect="requeued", at=requeued
        )
        JobStateChange.objects.create(job=job, to_state="RUNNING", at=at - timedelta(hours=1))
        JobStateChange.objects.create(
            job=job, to_state="RUNNING", at=at + timedelta(seconds=back_after)
        )

    samples = scrape()

    assert samples[f'{RUNNING}_count{{cluster="test"}}'] == 2
    assert samples[f'{RUNNING}_sum{{cluster="test"}}'] == pytest.approx(1200)
    assert samples[f'{RUNNING}_bucket{{cluster="test",le="300"}}'] == 1


def test_an_incident_refused_by_the_breaker_is_decided_at_its_refusal(synced):
    node = Node.objects.get(name="gpu-04")
    at = timezone.now() - timedelta(minutes=5)
    refused = incident(node, at)
    trip = BreakerTrip.objects.create(cluster=node.cluster, reason="too many")
    BreakerRefusal.objects.create(
        trip=trip, incident=refused, node=node, action="replace", reason="cap",
        at=at + timedelta(seconds=3),
    )  # fmt: skip

    samples = scrape()

    assert samples[f'{DECIDED}_count{{cluster="test"}}'] == 1
    assert samples[f'{DECIDED}_sum{{cluster="test"}}'] == pytest.approx(3)


def test_run_durations_by_action_and_outcome(synced):
    node = Node.objects.get(name="gpu-02")
    now = timezone.now()
    for seconds, status in ((90, "succeeded"), (4000, "failed")):
        Remediation.objects.create(
            node=node, action="drain", trigger="admin", reason="x", status=status,
            created_at=now - timedelta(seconds=seconds), finished_at=now,
        )  # fmt: skip

    samples = scrape()

    family = "medbay_remediation_run_duration_seconds"
    assert samples[f'{family}_sum{{action="drain",outcome="succeeded"}}'] == pytest.approx(90)
    assert samples[f'{family}_bucket{{action="drain",outcome="failed",le="3600"}}'] == 0
    assert samples[f'{family}_count{{action="drain",outcome="failed"}}'] == 1


def test_time_between_a_nodes_own_incidents_leaves_out_shared_faults(synced):
    node = Node.objects.get(name="gpu-05")
    cluster = Cluster.objects.get(name="test")
    start = timezone.now() - timedelta(days=2)
    for hours in (0, 5, 8):
        incident(node, start + timedelta(hours=hours))
    group = FaultGroup.objects.create(
        kind="part", cluster=cluster, rule="switch", window_s=60, opened_at=start
    )
    incident(node, start + timedelta(hours=6), group=group)

    samples = scrape()

    interval = "medbay_node_incident_interval_seconds"
    assert samples['medbay_node_incidents_total{cluster="test",node="gpu-05"}'] == 3
    assert samples['medbay_node_incidents_total{cluster="test",node="gpu-06"}'] == 0
    assert samples[f'{interval}_count{{cluster="test",node="gpu-05"}}'] == 2
    assert samples[f'{interval}_sum{{cluster="test",node="gpu-05"}}'] == pytest.approx(8 * 3600)


def test_the_oldest_waiting_run_is_aged_from_when_it_entered_its_status(synced):
    node = Node.objects.get(name="gpu-01")
    now = timezone.now()
    run = Remediation.objects.create(
        node=node, action="replace", trigger="policy", reason="x", status="awaiting_approval",
        created_at=now - timedelta(hours=5),
    )  # fmt: skip
    StatusChange.objects.create(
        remediation=run, from_status="proposed", to_status="awaiting_approval",
        at=now - timedelta(minutes=20),
    )  # fmt: skip

    samples = scrape()

    age = "medbay_remediation_oldest_run_age_seconds"
    assert samples[f'{age}{{status="awaiting_approval"}}'] == pytest.approx(1200, abs=5)
    assert samples[f'{age}{{status="needs_attention"}}'] == 0


def test_free_spares_per_pool_leave_out_ones_in_repair_or_busy(synced):
    pool = NodePool.objects.get(kind=PoolKind.SPARE)
    spares = list(Node.objects.filter(pool=pool, status="spare"))
    assert len(spares) == 2
    before = scrape()[f'medbay_spares_free{{cluster="test",pool="{pool.name}"}}']
    Node.objects.filter(pk=spares[0].pk).update(in_repair_since=timezone.now())

    after = scrape()[f'medbay_spares_free{{cluster="test",pool="{pool.name}"}}']

    assert (before, after) == (2, 1)


def test_agents_silent_for_longer_than_their_interval(synced, settings):
    settings.MEDBAY_AGENT_SILENT_AFTER_S = 180
    now = timezone.now()
    for name, last in (("gpu-01", now - timedelta(minutes=10)), ("gpu-02", now)):
        token, _ = NodeToken.issue(Node.objects.get(name=name))
        NodeToken.objects.filter(pk=token.pk).update(last_used_at=last)

    samples = scrape()

    assert samples['medbay_agents_enrolled{cluster="test"}'] == 2
    assert samples['medbay_agents_silent{cluster="test"}'] == 1


def test_failed_decisions_are_counted_retrying_and_undecidable(synced):
    node = Node.objects.get(name="gpu-03")
    at = timezone.now()
    incident(node, at, decision_due=True, decision_failures=1)
    incident(node, at, decision_failures=5, decision_error="Undecidable: KeyError")
    incident(node, at, decision_failures=1)  # failed once, then decided

    samples = scrape()

    assert samples['medbay_incident_decisions_failed{state="retrying"}'] == 1
    assert samples['medbay_incident_decisions_failed{state="undecidable"}'] == 1


def test_xid_events_are_counted_per_node_and_code(synced):
    from health.models import HealthEvent

    node = Node.objects.get(name="gpu-01")
    at = timezone.now()
    HealthEvent.objects.create(
        node=node, kind="xid", xid=79, severity="critical", observed_at=at,
        last_observed_at=at, count=3, fold_key="a",
    )  # fmt: skip

    samples = scrape()

    assert samples['medbay_xid_events_total{cluster="test",node="gpu-01",xid="79"}'] == 3


def test_the_exposition_with_every_family_filled_passes_promtool_check_metrics(fault, settings):
    import subprocess

    from django.test import Client

    from tests.portal.prometheus_tools import require_tool

    node, at, run = fault
    NodeStateChange.objects.create(node=node, to_status="drained", at=at + timedelta(seconds=70))
    Remediation.objects.create(
        node=Node.objects.get(name="gpu-02"), action="drain", trigger="admin", reason="x",
        status="succeeded", finished_at=timezone.now(),
    )  # fmt: skip
    BreakerTrip.objects.create(cluster=node.cluster, partition="train", reason="too many")
    text = Client().get("/metrics").content

    result = subprocess.run(
        [require_tool("promtool"), "check", "metrics"], input=text, capture_output=True
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout + result.stderr == b"", "promtool has lint remarks"


def test_a_decision_pass_that_fails_as_a_whole_is_counted(synced, monkeypatch):
    from django.core.cache import cache

    from remediation import admission
    from tests.remediation.conftest import ingest_xid

    cache.clear()
    assert scrape()["medbay_decision_passes_failed_total"] == 0
    real = admission._decide_locked
    calls = []

    def fails_once(*args, **kwargs):
        made = real(*args, **kwargs)
        calls.append(1)
        if len(calls) == 1:  # as a failed COMMIT would: the whole pass rolls back
            raise RuntimeError("the pass's COMMIT failed")
        return made

    monkeypatch.setattr(admission, "_decide_locked", fails_once)
    result = ingest_xid("gpu-02", 79)
    admission.on_incidents(result.incident_ids)
    assert scrape()["medbay_decision_passes_failed_total"] == 1
    assert len(calls) == 2, "then decided again on its own"
    assert Remediation.objects.filter(node__name="gpu-02").count() == 1
