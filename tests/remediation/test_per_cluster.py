"""Two clusters with the same node names: an agent's token, its XID, the run it
starts, the spare it takes and Medbay's maintenance holds all stay in one cluster."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from rest_framework.test import APIClient

from clusters.backends import registry
from clusters.config import ClusterConfig
from clusters.configure import add_cluster
from clusters.models import Node
from health.models import HealthEvent, Incident
from remediation import services
from remediation.engine import Engine
from remediation.models import Action, Mode, Remediation, Trigger
from remediation.steps.holds import HOLD_KEY
from remediation.transitions import RunStatus
from sync.cycle import apply_snapshot

from .test_check_holds import HoldingCluster

FAST = {"grace_s": 0, "verify_after_s": 0}


@pytest.fixture
def sim():
    """The environment's cluster, which can hold nodes for their checks."""
    simulator = HoldingCluster.standard(train=4, infer=1, spare=2, seed=7)
    simulator.fault_rate_per_gpu_day = 0
    registry.use(simulator)
    yield simulator
    registry.use(None)


@pytest.fixture
def second(sim, synced, monkeypatch):
    """A second, table-configured simulated cluster whose node names are the first's."""
    built = []

    def holding_simulator():
        simulator = HoldingCluster.standard(train=4, infer=1, spare=2, seed=11)
        simulator.fault_rate_per_gpu_day = 0
        built.append(simulator)
        return simulator

    monkeypatch.setattr(registry, "_simulator", holding_simulator)
    cluster = add_cluster("second", ClusterConfig(), by="test")
    backend = registry.backend_for(cluster)
    assert backend is built[0]
    cluster.sim = backend

    def sync():
        apply_snapshot(cluster, backend.partitions(), backend.nodes(), backend.jobs())

    cluster.sync = sync
    sync()
    return cluster


def members(backend) -> dict[str, list[str]]:
    return {partition.name: sorted(partition.nodes) for partition in backend.partitions()}


def token_for(node: str, *options: str) -> str:
    out = StringIO()
    call_command("node_token", node, *options, stdout=out)
    return out.getvalue().strip()


def test_a_token_for_a_name_in_two_clusters_must_name_its_cluster(second):
    with pytest.raises(CommandError, match=r"gpu-01 is in several clusters \(second, test\)"):
        token_for("gpu-01")
    with pytest.raises(CommandError, match="Unknown cluster 'nope'"):
        token_for("gpu-01", "--cluster", "nope")
    token_for("gpu-01", "--cluster", "second")
    node = Node.objects.get(agent_tokens__isnull=False)
    assert (node.cluster.name, node.name) == ("second", "gpu-01")


def test_the_tokens_page_issues_a_token_for_the_node_of_the_chosen_cluster(
    second, client, admin_user
):
    client.force_login(admin_user)
    page = client.get("/health/agents/").content.decode()
    assert 'value="second/gpu-01"' in page and 'value="test/gpu-01"' in page
    answer = client.post("/health/agents/", {"node": "second/gpu-01"})
    assert answer.status_code == 200
    assert Node.objects.get(agent_tokens__isnull=False).cluster == second
    refused = client.post("/health/agents/", {"node": "gpu-01"})
    assert refused.status_code == 400
    assert "in several clusters" in refused.content.decode()


def drive(engine, second, run, rounds=30):
    for _ in range(rounds):
        engine.run_once()
        second.sim.advance(timedelta(seconds=1))
        second.sync()
        Remediation.objects.filter(status=RunStatus.WAITING).update(due_at=timezone.now())
        run.refresh_from_db()
        if run.status not in (RunStatus.RUNNING, RunStatus.WAITING):
            return


def test_an_xid_from_the_second_clusters_gpu_01_heals_that_node_with_its_own_spare(
    sim, second, django_capture_on_commit_callbacks
):
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {token_for('gpu-01', '--cluster', 'second')}")
    event = {
        "id": "e1", "kind": "xid", "xid": 79, "pci": "0000:5d:00",
        "observed_at": timezone.now().isoformat(), "message": "GPU has fallen off the bus.",
    }  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        answer = agent.post(
            "/api/v1/health/events/", {"node": "gpu-01", "events": [event]}, format="json"
        )
    assert answer.status_code == 201, answer.content
    assert HealthEvent.objects.get().node.cluster == second
    assert Incident.objects.get().node.cluster == second
    run = Remediation.objects.get()
    assert (run.node.cluster, run.node.name, run.action) == (second, "gpu-01", Action.REPLACE)
    env_members, second_spares = members(sim), members(second.sim)["spare"]
    Remediation.objects.filter(pk=run.pk).update(context={**run.context, **FAST})
    drive(Engine("test-worker"), second, run)
    assert run.status == RunStatus.SUCCEEDED, run.message
    assert run.context["replacement"] in second_spares
    assert members(sim) == env_members, "no node or spare of the first cluster moved"
    assert not Remediation.objects.filter(node__cluster__name="test").exists()


def test_a_spare_of_one_cluster_never_replaces_a_node_of_the_other(sim, second):
    # The first cluster's spares are free and sound; the second's are all taken.
    for spare in members(second.sim)["spare"]:
        second.sim.drain_node(spare, "broken spare")
    second.sync()
    run = services.create_run(
        Node.objects.get(cluster=second, name="gpu-02"), Action.REPLACE,
        trigger=Trigger.ADMIN, reason="fan failure", context=dict(FAST),
    )  # fmt: skip
    env_members = members(sim)
    drive(Engine("test-worker"), second, run)
    assert run.status != RunStatus.SUCCEEDED
    assert (
        "replacement" not in run.context or run.context["replacement"] not in (env_members["spare"])
    )
    assert members(sim) == env_members


def test_the_stranded_holds_sweep_keeps_each_clusters_own_holds(sim, second):
    first_gpu_07 = Node.objects.get(cluster__name="test", name="gpu-07")
    services.create_run(
        first_gpu_07, Action.REPLACE, trigger=Trigger.ADMIN, reason="t", mode=Mode.APPROVAL,
        context={HOLD_KEY: "gpu-07"},
    )  # fmt: skip
    sim.hold_for_checks("gpu-07")  # the first cluster's run holds its gpu-07
    second.sim.hold_for_checks("gpu-07")  # stranded: no run of the second cluster names it
    assert Engine("t").release_stranded_holds() == ["gpu-07"]
    assert sim.held == {"gpu-07"}
    assert second.sim.held == set()
