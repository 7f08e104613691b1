"""An engine with no backend of its own acts on each run's cluster through that
cluster's backend and fleet (clusters configured in the table, issue 32)."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from clusters.backends import registry
from clusters.config import ClusterConfig
from clusters.configure import add_cluster
from clusters.models import Node
from remediation import services
from remediation.engine import Engine
from remediation.models import Action, Remediation, Trigger
from remediation.transitions import RunStatus
from sync.cycle import apply_snapshot

FAST = {"grace_s": 0, "verify_after_s": 0}


def reasons(backend) -> dict[str, str]:
    return {info.name: info.reason for info in backend.nodes()}


def test_a_run_on_a_configured_cluster_acts_on_that_cluster_and_no_other(sim, synced):
    second = add_cluster("second", ClusterConfig(), by="test")
    second_sim = registry.backend_for(second)
    second_sim.fault_rate_per_gpu_day = 0
    apply_snapshot(second, second_sim.partitions(), second_sim.nodes(), second_sim.jobs())
    before = reasons(sim)
    node = Node.objects.get(cluster=second, name="gpu-01")  # gpu-01 exists in both clusters
    run = services.create_run(
        node, Action.CORDON, trigger=Trigger.ADMIN, reason="bad GPU", context=dict(FAST)
    )
    engine = Engine("test-worker")  # no backend given: each run's cluster's own
    for _ in range(20):
        engine.run_once()
        second_sim.advance(timedelta(seconds=1))
        Remediation.objects.filter(status=RunStatus.WAITING).update(due_at=timezone.now())
        run.refresh_from_db()
        if run.status not in (RunStatus.RUNNING, RunStatus.WAITING):
            break
    assert run.status == RunStatus.SUCCEEDED, run.message
    assert "bad GPU" in reasons(second_sim)["gpu-01"]
    assert reasons(sim) == before  # the environment's cluster was not touched


def test_a_run_on_the_environments_cluster_uses_the_process_backend(sim, synced, cluster):
    engine = Engine("test-worker")
    assert engine.backend_for(cluster) is sim and engine.fleet_for(cluster) is sim


def members(backend) -> dict[str, list[str]]:
    return {partition.name: sorted(partition.nodes) for partition in backend.partitions()}


def test_a_replace_on_a_configured_cluster_takes_a_spare_of_that_cluster(sim, synced):
    second = add_cluster("second", ClusterConfig(), by="test")
    second_sim = registry.backend_for(second)
    second_sim.fault_rate_per_gpu_day = 0

    def sync_second():
        apply_snapshot(second, second_sim.partitions(), second_sim.nodes(), second_sim.jobs())

    sync_second()
    env_members = members(sim)
    second_spares = members(second_sim)["spare"]
    run = services.create_run(
        Node.objects.get(cluster=second, name="gpu-02"), Action.REPLACE,
        trigger=Trigger.ADMIN, reason="fan failure", context=dict(FAST),
    )  # fmt: skip
    engine = Engine("test-worker")
    for _ in range(30):
        engine.run_once()
        second_sim.advance(timedelta(seconds=1))
        sync_second()
        Remediation.objects.filter(status=RunStatus.WAITING).update(due_at=timezone.now())
        run.refresh_from_db()
        if run.status not in (RunStatus.RUNNING, RunStatus.WAITING):
            break
    assert run.status == RunStatus.SUCCEEDED, run.message
    assert run.context["replacement"] in second_spares
    assert run.context["replacement"] in members(second_sim)["train"]
    assert members(sim) == env_members  # no spare of the environment's cluster moved
