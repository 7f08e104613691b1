from datetime import timedelta

import pytest
from django.utils import timezone

from clusters.models import Node, Partition
from health.models import Incident
from remediation import admission, safety
from remediation.models import (
    Action,
    BreakerRefusal,
    BreakerTrip,
    Mode,
    Policy,
    Remediation,
    StepOutcome,
    Trigger,
)
from remediation.replay import replay
from remediation.transitions import RunStatus
from tests.remediation.conftest import drive, ingest_xid


@pytest.fixture
def instant_grace(synced):
    Partition.objects.update(checkpoint_grace_s=0)


def test_an_ingested_xid_79_starts_an_automatic_replacement(
    sim, synced, training_job, engine, instant_grace, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        result = ingest_xid("gpu-02", 79, gpu=3)
    run = Remediation.objects.get()
    assert (run.action, run.trigger, run.status) == (
        Action.REPLACE,
        Trigger.HEALTH_EVENT,
        RunStatus.RUNNING,
    )
    assert run.incident_id == result.incident_ids[0]
    assert run.reason == "XID 79 GPU 3 fallen off the bus"
    Remediation.objects.filter(pk=run.pk).update(context={**run.context, "verify_after_s": 0})
    drive(engine, sim, synced)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.message
    gpu_02 = {info.name: info for info in sim.nodes()}["gpu-02"]
    assert gpu_02.reason == f"medbay: Action:Replace [run {run.pk}]"
    assert run.steps.get(name="drain").message.endswith(
        f"medbay: XID 79 GPU 3 fallen off the bus [run {run.pk}]"
    )


def test_the_same_incident_growing_does_not_start_a_second_run(
    synced, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        ingest_xid("gpu-02", 79)
        ingest_xid("gpu-02", 45)
        ingest_xid("gpu-02", 79, gpu=5)
    assert Remediation.objects.count() == 1


def test_an_approval_policy_leaves_the_run_awaiting_approval(
    synced, engine, django_capture_on_commit_callbacks
):
    Policy.objects.create(xid=48, action=Action.RESET_GPU, mode=Mode.APPROVAL)
    with django_capture_on_commit_callbacks(execute=True):
        ingest_xid("gpu-03", 48, gpu=1)
    run = Remediation.objects.get()
    assert (run.action, run.status) == (Action.RESET_GPU, RunStatus.AWAITING_APPROVAL)
    assert run.policy.xid == 48
    assert engine.run_once() == 0
    assert not run.steps.exists()


def test_a_policy_row_overrides_the_product_default(synced, django_capture_on_commit_callbacks):
    Policy.objects.create(xid=79, action=Action.REBOOT, mode=Mode.DRY_RUN)
    with django_capture_on_commit_callbacks(execute=True):
        ingest_xid("gpu-02", 79)
    run = Remediation.objects.get()
    assert (run.action, run.dry_run, run.status) == (Action.REBOOT, True, RunStatus.RUNNING)


def test_an_application_xid_starts_nothing_that_interrupts_jobs(
    synced, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        ingest_xid("gpu-02", 43)
    assert not Remediation.objects.exists()


def test_replay_says_what_the_policies_would_have_done_and_changes_nothing(synced):
    ingest_xid("gpu-02", 79, gpu=3, ago=timedelta(hours=2))
    ingest_xid("gpu-03", 13, gpu=0, ago=timedelta(hours=1))
    ingest_xid("gpu-04", 48, gpu=1, ago=timedelta(days=3))
    Policy.objects.create(xid=13, action=Action.NOTIFY, mode=Mode.AUTOMATIC)
    now = timezone.now()
    decisions = replay(now - timedelta(days=1), now)
    assert [(d.node, d.xid, d.action, d.mode) for d in decisions] == [
        ("gpu-02", 79, Action.REPLACE, Mode.AUTOMATIC),
        ("gpu-03", 13, Action.NOTIFY, Mode.AUTOMATIC),
    ]
    assert decisions[0].reason == "XID 79 GPU 3 fallen off the bus"
    assert not Remediation.objects.exists()


def test_replay_refuses_naive_datetimes(synced):
    with pytest.raises(ValueError):
        replay(timezone.now().replace(tzinfo=None), timezone.now())


def test_an_event_storm_drains_no_more_nodes_than_the_breaker_allows(
    big_sim, django_capture_on_commit_callbacks
):
    names = sorted(info.name for info in big_sim.nodes() if "train" in info.partitions)
    assert len(names) == 20
    with django_capture_on_commit_callbacks(execute=True):
        for name in names:
            ingest_xid(name, 79)
    cap = safety.partition_cap(20)
    assert cap == 2
    assert Remediation.objects.count() == cap
    trip = BreakerTrip.objects.get()
    assert (trip.partition, trip.suppressed, trip.closed_at) == ("train", 18, None)
    assert safety.breaker_state().open


def test_each_incident_the_breaker_refuses_is_written_down_with_its_reason(
    big_sim, django_capture_on_commit_callbacks
):
    names = sorted(info.name for info in big_sim.nodes() if "train" in info.partitions)
    with django_capture_on_commit_callbacks(execute=True):
        for name in names[:-1]:
            ingest_xid(name, 79)
    with django_capture_on_commit_callbacks(execute=False):
        last = ingest_xid(names[-1], 79)
    (outcome,) = admission.on_incidents(last.incident_ids)
    acted = {run.incident_id for run in Remediation.objects.all()}
    refusals = list(BreakerRefusal.objects.order_by("id"))
    assert len(acted) == 2 and len(refusals) == 18
    assert {r.incident_id for r in refusals} | acted == set(
        Incident.objects.values_list("pk", flat=True)
    )
    first = refusals[0]
    assert (first.action, first.trip) == ("replace", BreakerTrip.objects.get())
    assert first.reason == "2 of 20 nodes in partition train are already in remediation (limit 10%)"
    assert outcome.outcome == f"suppressed: circuit breaker open: {first.reason}"


def test_a_closing_breaker_does_not_replay_what_it_suppressed(
    big_sim, settings, django_capture_on_commit_callbacks
):
    names = sorted(info.name for info in big_sim.nodes() if "train" in info.partitions)
    with django_capture_on_commit_callbacks(execute=True):
        for name in names[:6]:
            ingest_xid(name, 79)
    for run in Remediation.objects.all():
        from remediation.services import transition

        transition(run, RunStatus.CANCELLED, message="storm over")
    settings.MEDBAY_BREAKER_WINDOW_S = 0
    state = safety.breaker_state()
    assert not state.open
    assert BreakerTrip.objects.get().closed_at is not None
    assert Remediation.objects.count() == 2
    with django_capture_on_commit_callbacks(execute=True):
        ingest_xid(names[10], 79)
    assert Remediation.objects.count() == 3
    assert Remediation.objects.latest("id").node.name == names[10]


def test_admin_runs_are_never_blocked_by_the_breaker(big_sim):
    from remediation.services import create_run

    names = sorted(info.name for info in big_sim.nodes() if "train" in info.partitions)
    for name in names[:6]:
        create_run(Node.objects.get(name=name), Action.DRAIN, trigger=Trigger.ADMIN, reason="x")
    assert Remediation.objects.filter(status=RunStatus.RUNNING).count() == 6


def test_a_flapping_node_is_quarantined_instead_of_healed(
    sim, synced, engine, django_capture_on_commit_callbacks
):
    for hours in (10, 5):
        ingest_xid("gpu-02", 48, gpu=1, ago=timedelta(hours=hours))
    assert Incident.objects.filter(node__name="gpu-02").count() == 2
    with django_capture_on_commit_callbacks(execute=True):
        ingest_xid("gpu-02", 79, gpu=1)
    run = Remediation.objects.get()
    assert run.planned_steps == ["quarantine"]
    assert run.reason == "quarantined, flapping: 3 faults in 24 h"
    engine.run_once()
    run.refresh_from_db()
    assert run.status == RunStatus.NEEDS_ATTENTION
    assert "quarantined" in run.message
    node = {info.name: info for info in sim.nodes()}["gpu-02"]
    assert ("drain" in node.flags, node.reason) == (True, "medbay: quarantined, flapping")
    assert Node.objects.get(name="gpu-02").cordoned
    assert engine.run_once() == 0  # no return to service without a human
    assert run.steps.get().outcome == StepOutcome.FAILED


def test_runs_refused_or_still_awaiting_approval_do_not_count_towards_the_breaker(
    big_sim, django_capture_on_commit_callbacks
):
    """They took no node out: four rejected reboots must not stop an automatic replace."""
    from remediation.services import create_run, transition

    names = sorted(info.name for info in big_sim.nodes() if "train" in info.partitions)
    for name in names[:3]:
        run = create_run(
            Node.objects.get(name=name), Action.REBOOT, trigger=Trigger.POLICY,
            reason="x", mode=Mode.APPROVAL,
        )  # fmt: skip
        transition(run, RunStatus.REJECTED, message="not now")
    create_run(
        Node.objects.get(name=names[3]), Action.REBOOT, trigger=Trigger.POLICY,
        reason="x", mode=Mode.APPROVAL,
    )  # fmt: skip
    assert safety.breaker_blocks(Node.objects.get(name=names[10])) == ""
    with django_capture_on_commit_callbacks(execute=True):
        ingest_xid(names[10], 79)
    assert Remediation.objects.get(node__name=names[10]).action == Action.REPLACE


def test_runs_in_another_cluster_count_towards_that_clusters_breaker_only(
    big_sim, django_capture_on_commit_callbacks
):
    from clusters.backends.simulated import SimulatedCluster
    from clusters.models import Cluster
    from remediation.services import create_run
    from sync.cycle import apply_snapshot

    other = SimulatedCluster.standard(train=20, infer=0, spare=2, prefix="other", seed=4)
    elsewhere = Cluster.objects.create(name="elsewhere", backend="simulated")
    apply_snapshot(elsewhere, other.partitions(), other.nodes(), other.jobs())
    taken = Node.objects.filter(cluster=elsewhere, partitions__name="train").order_by("name")
    for node in taken[: safety.max_nodes()]:  # that cluster's own limit, reached
        create_run(node, Action.REPLACE, trigger=Trigger.POLICY, reason="XID 79")
    assert safety.breaker_blocks(taken[safety.max_nodes()]) != ""

    names = sorted(info.name for info in big_sim.nodes() if "train" in info.partitions)
    assert safety.breaker_blocks(Node.objects.get(name=names[0])) == ""
    with django_capture_on_commit_callbacks(execute=True):
        ingest_xid(names[0], 79)
    assert Remediation.objects.get(node__name=names[0]).action == Action.REPLACE
