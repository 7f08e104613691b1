"""A replacement node with an agent is validated on its own agent's reports."""

from datetime import timedelta
from itertools import count

import pytest
from django.utils import timezone

from clusters.models import Gpu, GpuHealth, Node
from health import validation
from health.ingest import ingest, validate_batch
from health.models import NodeToken

_ids = count(1)


class SlurmLike:
    """A backend without the simulator's gpu_health, as SlurmBackend is, on a real
    fleet: its nodes are other machines."""

    name = "slurm"
    slurm_conf = ""

    def checks_run_on_this_host(self) -> bool:
        return False


class MiniclusterLike(SlurmLike):
    """SlurmBackend on the local minicluster, where every node is this host."""

    def checks_run_on_this_host(self) -> bool:
        return True


@pytest.fixture
def spare(synced):
    node = Node.objects.get(name="gpu-06")
    NodeToken.issue(node)
    return node


def report(node, check, status, *, ago=timedelta(0)):
    observed = (timezone.now() - ago).isoformat()
    event = {
        "id": f"check-{next(_ids)}",
        "kind": "check",
        "check": check,
        "status": status,
        "message": f"{check} {status}",
        "observed_at": observed,
    }
    ingest(node, validate_batch({"node": node.name, "events": [event]}).events)


def test_fresh_passing_checks_validate_the_node(spare):
    report(spare, "nvidia_smi_responds", "pass")
    ok, message = validation.reported_health("gpu-06")
    assert ok, message
    assert "its agent reports it healthy" in message


def test_without_any_check_report_validation_waits_for_the_agent(spare):
    ok, message = validation.reported_health("gpu-06")
    assert not ok
    assert "waiting for the agent on gpu-06 to report its health checks (none yet" in message


def test_a_report_older_than_three_minutes_is_not_enough(spare):
    report(spare, "nvidia_smi_responds", "pass", ago=timedelta(minutes=4))
    ok, message = validation.reported_health("gpu-06")
    assert not ok and "waiting for the agent on gpu-06" in message


def test_a_gpu_reported_unhealthy_fails_validation(spare):
    report(spare, "nvidia_smi_responds", "pass")
    Gpu.objects.filter(node=spare, index=5).update(health=GpuHealth.DEGRADED)
    ok, message = validation.reported_health("gpu-06")
    assert (ok, message) == (False, "the agent on gpu-06 reports GPU 5 degraded")


def test_a_check_that_failed_minutes_ago_still_fails_validation(spare):
    report(spare, "disk_free", "fail", ago=timedelta(minutes=5))
    report(spare, "nvidia_smi_responds", "pass")
    ok, message = validation.reported_health("gpu-06")
    assert not ok
    assert message.startswith("gpu-06 reported disk_free at ")


def test_on_slurm_a_node_with_an_agent_is_judged_on_its_reports_not_a_local_run(spare, monkeypatch):
    def local_run(*args, **kwargs):
        raise AssertionError("ran the checks on the engine host")

    monkeypatch.setattr(validation, "agent_check", local_run)
    report(spare, "nvidia_smi_responds", "pass")
    ok, message = validation.validate_node(SlurmLike(), "gpu-06")
    assert ok, message


def test_on_the_minicluster_a_node_without_an_agent_runs_the_checks_here(synced, monkeypatch):
    calls = []
    monkeypatch.setattr(
        validation, "agent_check", lambda node, slurm_conf="": calls.append(node) or (True, "ok")
    )
    assert validation.validate_node(MiniclusterLike(), "gpu-05") == (True, "ok")
    assert calls == ["gpu-05"]


def test_on_a_real_fleet_a_node_without_an_agent_cannot_be_validated_here(synced, monkeypatch):
    def local_run(*args, **kwargs):
        raise AssertionError("ran the checks on the engine host")

    monkeypatch.setattr(validation, "agent_check", local_run)
    with pytest.raises(validation.CannotValidate, match="gpu-05 has no agent"):
        validation.validate_node(SlurmLike(), "gpu-05")


def test_a_backend_that_knows_gpu_health_is_asked_before_any_agent(sim, synced):
    sim.inject_xid("gpu-05", 2, 79)
    assert validation.validate_node(sim, "gpu-05") == (False, "GPU(s) 2 not healthy")
    sim.repair_gpu("gpu-05", 2)
    assert validation.validate_node(sim, "gpu-05") == (True, "8 GPUs healthy")


class HeldSlurmLike(SlurmLike):
    """A fleet's Slurm that holds gpu-06 in Medbay's maintenance reservation."""

    def hold_for_checks(self, node):
        pass

    def release_checks_hold(self, node):
        pass

    def checks_holds(self):
        return ["gpu-06"]


def test_a_held_node_waits_for_its_agents_deep_checks_and_their_verdict(spare):
    report(spare, "nvidia_smi_responds", "pass")
    ok, message = validation.validate_node(HeldSlurmLike(), "gpu-06")
    assert not ok and "waiting for the agent on gpu-06 to run its deep checks" in message
    report(spare, "deep_checks", "fail")
    ok, message = validation.validate_node(HeldSlurmLike(), "gpu-06")
    assert not ok and "gpu-06 failed its deep checks: deep_checks fail" in message


def test_a_held_node_passes_on_a_fresh_deep_pass_and_an_unheld_one_needs_none(spare):
    report(spare, "nvidia_smi_responds", "pass")
    assert validation.validate_node(SlurmLike(), "gpu-06")[0], "not held: the usual checks"
    report(spare, "deep_checks", "pass")
    ok, message = validation.validate_node(HeldSlurmLike(), "gpu-06")
    assert ok and "deep checks: deep_checks pass" in message
