"""A step asks what the backend can do and says what it does instead when it cannot:
Slurm cannot reset a GPU or see its health, a spare-pool fleet sees no other holds,
and a node nothing may judge is left to an admin rather than failed."""

from __future__ import annotations

import pytest

from clusters.backends.capabilities import RepairsGpus, ReportsFleetHolders, ReportsGpuHealth
from clusters.backends.slurm_spares import SlurmSparesFleet
from clusters.models import Node, Partition
from health.validation import CannotValidate
from remediation import actions
from remediation.engine import Engine
from remediation.models import Action, Trigger
from remediation.services import create_run
from remediation.transitions import RunStatus
from tests.remediation.conftest import drive

pytestmark = pytest.mark.django_db


class AsSlurm:
    """The simulator as Slurm sees a cluster: it repairs no GPU and reports no GPU's
    health. A wrapper declares no capability, so it has none of the simulator's."""

    def __init__(self, sim):
        self._sim = sim

    def __getattr__(self, name):
        if name in ("repair_gpu", "gpu_health", "nodes_named"):
            raise AttributeError(name)
        return getattr(self._sim, name)


def reset_run(node_name="gpu-03"):
    Partition.objects.update(checkpoint_grace_s=0)
    return create_run(
        Node.objects.get(name=node_name), Action.RESET_GPU, trigger=Trigger.HEALTH_EVENT,
        reason="XID 48 GPU 2 double bit ECC", context={"gpu": 2, "verify_after_s": 0},
    )  # fmt: skip


def test_the_simulator_declares_what_slurm_cannot_do(sim):
    assert isinstance(sim, RepairsGpus) and isinstance(sim, ReportsGpuHealth)
    assert not isinstance(AsSlurm(sim), RepairsGpus)
    assert not isinstance(AsSlurm(sim), ReportsGpuHealth)
    assert not isinstance(SlurmSparesFleet(sim), ReportsFleetHolders)


def test_a_backend_that_can_repair_gpus_resets_the_gpu_itself(sim, synced, engine):
    sim.inject_xid("gpu-03", 2, 48)
    run = reset_run()

    drive(engine, sim, synced)

    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.message
    assert run.steps.get(name="reset_gpu").message == "reset GPU(s) 2 of gpu-03"
    assert sim.gpu_health("gpu-03")[2] == "healthy"


def test_a_backend_that_cannot_repair_gpus_asks_an_admin_and_goes_on_after_a_retry(
    sim, synced, admin_user
):
    sim.inject_xid("gpu-03", 2, 48)
    engine = Engine(
        "test-worker", backend=AsSlurm(sim), fleet=sim, validator=lambda b, n: (True, "ok")
    )
    run = reset_run()

    drive(engine, sim, synced)

    run.refresh_from_db()
    assert run.status == RunStatus.NEEDS_ATTENTION and run.step_name == "reset_gpu"
    assert "Reset GPU 2 on gpu-03 with `nvidia-smi -r -i N`" in run.message
    assert sim.gpu_health("gpu-03")[2] == "failed"  # Medbay did not touch it
    assert "drain" in {node.name: node for node in sim.nodes()}["gpu-03"].flags

    actions.retry(run, admin_user, "reset by hand")
    drive(engine, sim, synced)

    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.message
    assert run.steps.filter(name="reset_gpu").last().message == (
        "GPU(s) 2 of gpu-03 reset by an admin"
    )


def test_a_node_nothing_may_judge_is_left_to_an_admin_not_failed(sim, synced):
    def nobody_may_judge(backend, node):
        raise CannotValidate(f"{node} has no agent")

    engine = Engine("test-worker", backend=sim, fleet=sim, validator=nobody_may_judge)
    run = reset_run()

    drive(engine, sim, synced)

    run.refresh_from_db()
    assert run.status == RunStatus.NEEDS_ATTENTION and run.step_name == "validate"
    assert run.message == "gpu-03 cannot be validated: gpu-03 has no agent; then retry."
