"""Issue 27.5 on the simulator: only healthy spares come in, a spare that fails validation
goes to repair and the next one is tried in the same run, a polling step writes a row per
change of outcome, and the breaker lets a small spare pool heal its own faults."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone

from clusters.backends.base import BackendError
from clusters.backends.slurm_spares import SlurmSparesFleet
from clusters.models import Gpu, GpuHealth, Node, NodeStatus
from demo.simulation import SimulationLoop
from health.models import Incident, Severity
from remediation import safety, spares
from remediation.engine import Engine
from remediation.models import (
    Action,
    BreakerRefusal,
    Remediation,
    StepOutcome,
    Trigger,
)
from remediation.services import create_run, transition
from remediation.steps import hardware as hardware_steps
from remediation.transitions import RunStatus
from tests.conftest import PASSWORD
from tests.remediation.conftest import drive, ingest_xid

pytestmark = pytest.mark.django_db
FAST = {"grace_s": 0}


@pytest.fixture
def four_spares(cluster):
    """train gpu-01..04, infer gpu-05, spares gpu-06..09, synced."""
    from clusters.backends import registry
    from clusters.backends.simulated import SimulatedCluster
    from sync.cycle import apply_snapshot

    simulator = SimulatedCluster.standard(train=4, infer=1, spare=4, seed=7)
    simulator.fault_rate_per_gpu_day = 0
    registry.use(simulator)

    def sync(advance: timedelta | None = None):
        if advance:
            simulator.advance(advance)
        apply_snapshot(cluster, simulator.partitions(), simulator.nodes(), simulator.jobs())

    sync()
    simulator.sync = sync
    yield simulator
    registry.use(None)


def replace(node_name="gpu-02", **kwargs) -> Remediation:
    options = {"trigger": Trigger.ADMIN, "reason": "fan failure", "context": dict(FAST)}
    return create_run(Node.objects.get(name=node_name), Action.REPLACE, **{**options, **kwargs})


def info(sim, name):
    return {node.name: node for node in sim.nodes()}[name]


def members(sim):
    return {partition.name: sorted(partition.nodes) for partition in sim.partitions()}


def step_until(engine, run, name):
    for _ in range(len(run.planned_steps)):
        run.refresh_from_db()
        if run.step_name == name:
            return run
        Remediation.objects.filter(pk=run.pk).update(due_at=timezone.now())
        engine.advance(engine.claim())
    raise AssertionError(f"{name} never came up: {run.message}")


def poll(engine, run):
    Remediation.objects.filter(pk=run.pk).update(due_at=timezone.now())
    engine.advance(engine.claim())
    run.refresh_from_db()


def rows(run, name="validate"):
    return list(run.steps.filter(name=name).order_by("id").values_list("outcome", "message"))


# ------------------------------------------------------------------ the choice


def test_a_spare_whose_gpu_failed_is_never_chosen_and_a_replace_picks_the_healthy_one(
    sim, synced, engine
):
    sim.inject_xid("gpu-06", 6, 79)
    ingest_xid("gpu-06", 79, gpu=6)  # what its agent reported: GPU 6 failed
    run = replace()

    drive(engine, sim, synced)

    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.message
    assert run.context["replacement"] == "gpu-07"
    assert "train" in info(sim, "gpu-07").partitions and "gpu-06" in members(sim)["spare"]
    (eligibility,) = rows(run, "check_eligibility")
    assert eligibility[1].startswith("1 healthy free spare(s): gpu-07; not offered: gpu-06 (")
    assert "GPU 6 failed" in eligibility[1] and "open incident" in eligibility[1]
    assert not run.context.get("rejected_spares")


def test_a_spare_with_an_open_incident_an_active_run_or_in_repair_is_not_offered(four_spares):
    now = timezone.now()
    cluster_id = Node.objects.get(name="gpu-06").cluster_id
    Incident.objects.create(
        node=Node.objects.get(name="gpu-06"), opened_at=now, last_event_at=now,
        severity=Severity.WARNING, summary="disk_free failed",
    )  # fmt: skip
    create_run(Node.objects.get(name="gpu-07"), Action.DRAIN, trigger=Trigger.ADMIN, reason="x")
    Node.objects.filter(name="gpu-08").update(in_repair_since=now, repair_note="RMA 12")

    choice = spares.choose(cluster_id, ["gpu-06", "gpu-07", "gpu-08", "gpu-09"])

    assert choice.offered == ["gpu-09"]
    assert sorted(choice.skipped) == ["gpu-06", "gpu-07", "gpu-08"]
    assert choice.skipped["gpu-06"].startswith("open incident ")
    assert choice.skipped["gpu-07"].startswith("in remediation by run ")
    assert choice.skipped["gpu-08"].endswith(": RMA 12")


def test_an_incident_over_and_decided_no_longer_bars_a_spare_but_ranks_it_last(four_spares):
    now, long_ago = timezone.now(), timezone.now() - timedelta(hours=2)
    Incident.objects.create(
        node=Node.objects.get(name="gpu-06"), opened_at=long_ago, last_event_at=long_ago,
        severity=Severity.CRITICAL, xids=[79],
    )  # fmt: skip
    Incident.objects.create(
        node=Node.objects.get(name="gpu-08"), opened_at=now, last_event_at=now,
        severity=Severity.WARNING, cleared_at=now, cleared_reason="disk_free passed again",
    )  # fmt: skip
    cluster_id = Node.objects.get(name="gpu-06").cluster_id

    choice = spares.choose(cluster_id, ["gpu-06", "gpu-07", "gpu-08", "gpu-09"], exclude=["gpu-09"])

    assert (choice.offered, choice.skipped) == (["gpu-07", "gpu-08", "gpu-06"], {})


def test_both_spare_pool_fleets_bring_in_the_first_still_free_of_the_spares_given(sim, synced):
    reason = "medbay: Action:Replace [run 3]"
    assert sim.replace("gpu-02", reason, spares=["gpu-07", "gpu-06"]) == "gpu-07"
    with pytest.raises(BackendError) as raised:
        sim.replace("gpu-03", reason, spares=["gpu-07"])
    assert not raised.value.permanent  # taken meanwhile: the step chooses again
    assert SlurmSparesFleet(sim).replace("gpu-03", reason, spares=["gpu-07", "gpu-06"]) == "gpu-06"
    assert "gpu-06" in members(sim)["train"] and "gpu-03" not in members(sim)["train"]


def test_the_impact_preview_offers_only_the_healthy_spares_and_says_why(
    sim, synced, client, admin_user
):
    ingest_xid("gpu-06", 79, gpu=6)
    assert client.login(username=admin_user.username, password=PASSWORD)
    html = client.get(reverse("node-action", args=["gpu-02", "replace"])).content.decode()
    assert "Spare capacity: 1 free spare (gpu-07)." in html
    assert 'id="spares-skipped">Not offered, as Medbay knows them unsound: gpu-06 (GPU 6' in html


# ------------------------------------------------------------------ validation


def test_a_replacement_known_unhealthy_goes_to_repair_at_once_and_the_next_spare_comes_in(
    sim, synced, engine
):
    run = step_until(engine, replace(), "validate")
    assert run.context["replacement"] == "gpu-06"
    # Its agent reports XID 79 while it is being validated.
    sim.inject_xid("gpu-06", 6, 79)
    Gpu.objects.filter(node__name="gpu-06", index=6).update(
        health=GpuHealth.FAILED, health_reason="XID 79 fallen off the bus"
    )

    poll(engine, run)

    assert run.status == RunStatus.WAITING and run.step_name == "validate"
    rejected = info(sim, "gpu-06")
    assert "drain" in rejected.flags and "fail" in rejected.flags
    assert rejected.reason.startswith("medbay: failed validation replacing gpu-02: GPU 6 failed")
    assert rejected.reason.endswith(f"[run {run.pk}]")
    assert Node.objects.get(name="gpu-06").in_repair_since is not None
    assert run.context["replacement"] == "gpu-07"
    assert list(run.context["rejected_spares"]) == ["gpu-06"]
    assert "train" in info(sim, "gpu-07").partitions and "train" not in rejected.partitions
    ((outcome, message),) = rows(run)
    assert outcome == StepOutcome.FAILED
    assert message.startswith("gpu-06 failed validation: GPU 6 failed")
    assert message.endswith("drained and sent to repair; gpu-07 takes its place")

    drive(engine, sim, synced)

    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.message
    assert [outcome for outcome, _ in rows(run)] == [StepOutcome.FAILED, StepOutcome.SUCCEEDED]
    assert rows(run)[-1][1].startswith("gpu-07 passed validation")
    assert Node.objects.get(name="gpu-06").status == NodeStatus.IN_REPAIR


def test_a_replacement_that_never_validates_goes_to_repair_and_the_next_spare_is_tried(
    sim, synced, engine, monkeypatch
):
    monkeypatch.setattr(hardware_steps, "VALIDATE_PATIENCE_S", 0)
    sim.inject_xid("gpu-06", 2, 79)  # broken, and nothing reported it to Medbay
    run = step_until(engine, replace(), "validate")

    poll(engine, run)  # waits: the patience starts
    assert rows(run)[-1][0] == StepOutcome.WAITING
    poll(engine, run)  # past the patience: rejected, gpu-07 swapped in
    poll(engine, run)  # gpu-07 passes

    assert run.status == RunStatus.RUNNING and run.step_name == "release_jobs", run.message
    assert [outcome for outcome, _ in rows(run)] == [
        StepOutcome.WAITING,
        StepOutcome.FAILED,
        StepOutcome.SUCCEEDED,
    ]
    assert "gpu-06 failed validation: not valid after 0 s: GPU(s) 2 not healthy" in rows(run)[1][1]
    assert run.context["replacement"] == "gpu-07"
    assert "fail" in info(sim, "gpu-06").flags


def test_with_no_healthy_spare_left_the_rejected_one_is_drained_and_the_run_asks_an_admin(
    sim, synced, engine
):
    run = step_until(engine, replace(), "validate")
    ingest_xid("gpu-06", 79, gpu=1)
    ingest_xid("gpu-07", 79, gpu=1)

    poll(engine, run)

    assert run.status == RunStatus.NEEDS_ATTENTION
    assert run.message.startswith("gpu-06 failed validation (GPU 1 failed")
    assert "No free spare to replace gpu-02" in run.message
    assert "not offered, as Medbay knows them unsound: gpu-07 (GPU 1 failed" in run.message
    assert info(sim, "gpu-06").reason.startswith("medbay: failed validation replacing gpu-02")
    assert "drain" in info(sim, "gpu-06").flags


# ------------------------------------------------------------------ the timeline


def test_sixty_polls_with_the_same_outcome_write_one_row(sim, synced):
    engine = Engine("test", backend=sim, fleet=sim, validator=lambda b, n: (False, "no report"))
    run = step_until(engine, replace(), "validate")

    for _ in range(60):
        poll(engine, run)

    assert rows(run) == [(StepOutcome.WAITING, "gpu-06 not valid yet: no report")]
    assert run.status == RunStatus.WAITING
    engine.validator = lambda backend, node: (True, "checks pass")
    poll(engine, run)
    assert [outcome for outcome, _ in rows(run)] == [StepOutcome.WAITING, StepOutcome.SUCCEEDED]


def test_a_spare_slurm_has_not_heard_from_since_its_resume_is_waited_for_not_given_up_on(
    sim, synced
):
    """Slurm marks a resumed node not responding until its slurmd answers a ping (both
    22.05 and 24.11; longer on a loaded controller): the Slurm spare pool does not offer
    it meanwhile, and the run waits for it instead of asking an admin for a spare."""
    engine = Engine("test", backend=sim, fleet=SlurmSparesFleet(sim))
    for spare in ("gpu-06", "gpu-07"):
        sim._nodes[spare].flags.add("not_responding")
    run = step_until(engine, replace(), "check_eligibility")
    poll(engine, run)

    assert run.status == RunStatus.WAITING and run.step_name == "check_eligibility"
    assert run.message == (
        "No free spare yet: gpu-06 not responding to Slurm yet (just resumed?); "
        "gpu-07 not responding to Slurm yet (just resumed?); checking again"
    )
    sim._nodes["gpu-07"].flags.discard("not_responding")  # its slurmd answered
    step_until(engine, run, "validate")
    assert run.context["replacement"] == "gpu-07"


def test_a_spare_that_never_answers_slurm_is_given_up_on_after_the_wait(sim, synced):
    engine = Engine("test", backend=sim, fleet=SlurmSparesFleet(sim))
    for spare in ("gpu-06", "gpu-07"):
        sim._nodes[spare].flags.add("not_responding")
    run = step_until(engine, replace(), "check_eligibility")
    poll(engine, run)
    long_ago = timezone.now() - hardware_steps.SPARE_REGISTRATION_WAIT - timedelta(seconds=1)
    Remediation.objects.filter(pk=run.pk).update(
        context={**run.context, "spares_awaited_at": long_ago.isoformat()}
    )
    poll(engine, run)

    assert run.status == RunStatus.NEEDS_ATTENTION
    assert run.message.startswith("No free spare to replace gpu-02: the spare pool is empty")


# ------------------------------------------------------------------ the breaker


def test_the_partition_limit_has_a_floor_and_never_exceeds_the_partition(settings):
    assert [safety.partition_cap(n) for n in (1, 2, 4, 19, 20, 40)] == [1, 2, 2, 2, 2, 4]
    settings.MEDBAY_BREAKER_PARTITION_MIN_NODES = 3
    assert [safety.partition_cap(n) for n in (2, 4, 40)] == [2, 3, 4]


def test_a_four_node_spare_pools_breaker_admits_the_remediation_of_one_faulty_spare(
    four_spares, django_capture_on_commit_callbacks
):
    busy = create_run(Node.objects.get(name="gpu-07"), Action.DRAIN, trigger=Trigger.HEALTH_EVENT,
                      reason="medbay-test: another spare's fault")  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        ingest_xid("gpu-08", 79, gpu=5)

    assert not BreakerRefusal.objects.exists()
    run = Remediation.objects.get(node__name="gpu-08")
    transition(busy, RunStatus.CANCELLED, message="done")
    engine = Engine("test", backend=four_spares, fleet=four_spares)
    Remediation.objects.filter(pk=run.pk).update(context={**run.context, **FAST})

    drive(engine, four_spares, four_spares.sync)

    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.message
    assert "replacement" not in run.context
    assert members(four_spares)["train"] == ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]
    spare = info(four_spares, "gpu-08")
    assert "drain" in spare.flags and spare.reason.endswith(f"[run {run.pk}]")
    assert rows(run, "replace")[0][1] == (
        "gpu-08 is a spare: nothing to replace; kept drained and sent to repair"
    )
    node = Node.objects.get(name="gpu-08")
    assert node.status == NodeStatus.IN_REPAIR and node.repair_note.startswith("XID 79 GPU 5")


def test_a_training_partition_of_four_admits_a_second_faulty_node(
    sim, synced, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        ingest_xid("gpu-01", 79)
        ingest_xid("gpu-03", 79)
        ingest_xid("gpu-04", 79)

    assert sorted(Remediation.objects.values_list("node__name", flat=True)) == ["gpu-01", "gpu-03"]
    refusal = BreakerRefusal.objects.get()
    assert refusal.node.name == "gpu-04"
    assert refusal.reason == (
        "2 of 4 nodes in partition train are already in remediation "
        "(limit 2: 10% of the partition, at least 2)"
    )


def test_a_refusal_shows_on_the_node_page_and_the_board_while_its_trip_is_open(
    sim, synced, client, researcher, settings, django_capture_on_commit_callbacks
):
    settings.MEDBAY_BREAKER_MAX_NODES = 1
    with django_capture_on_commit_callbacks(execute=True):
        ingest_xid("gpu-01", 79)
        ingest_xid("gpu-03", 79)
    assert client.login(username=researcher.username, password=PASSWORD)

    node_page = client.get(reverse("node-detail", args=["gpu-03"]), follow=True).content.decode()
    board = client.get(reverse("board")).content.decode()

    why = "1 nodes were taken out automatically in the last 10 min (limit 1)"
    assert 'id="breaker-refusal">Automatic remediation of gpu-03 (replace, incident ' in node_page
    assert why in node_page
    refused = '<a href="/nodes/test/gpu-03/">gpu-03</a>'
    assert f'id="breaker-refused">Refused while it is open: {refused}' in board
    assert why in board
    other = client.get(reverse("node-detail", args=["gpu-02"]), follow=True).content.decode()
    assert 'id="breaker-refusal"' not in other

    settings.MEDBAY_BREAKER_WINDOW_S = 0  # the trip closes
    node_page = client.get(reverse("node-detail", args=["gpu-03"]), follow=True).content.decode()
    assert 'id="breaker-refusal"' not in node_page


# ------------------------------------------------------------------ the demo and settings


def test_the_simulated_repair_shop_returns_a_spare_medbay_sent_to_repair_ready_to_offer(
    sim, cluster, synced
):
    loop = SimulationLoop(sim, cluster)
    sim.drain_node("gpu-06", "medbay: XID 79 GPU 1 fallen off the bus [run 5]")
    Node.objects.filter(name="gpu-06").update(in_repair_since=timezone.now(), repair_note="x")
    loop.step(timedelta(minutes=1))
    assert Node.objects.get(name="gpu-06").status == NodeStatus.IN_REPAIR

    loop.step(timedelta(hours=7))

    node = Node.objects.get(name="gpu-06")
    assert (node.status, node.in_repair_since) == (NodeStatus.SPARE, None)
    assert spares.choose(cluster.pk, sim.spare_capacity()).offered == ["gpu-06", "gpu-07"]


def test_a_partition_floor_below_one_refuses_to_start():
    env = {**os.environ, "DEBUG": "true", "MEDBAY_BREAKER_PARTITION_MIN_NODES": "0"}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=Path(__file__).resolve().parents[2], env=env,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0
    assert "MEDBAY_BREAKER_PARTITION_MIN_NODES must be at least 1" in result.stderr
