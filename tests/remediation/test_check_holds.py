"""Medbay's maintenance holds around the checks a node passes before it takes jobs,
on the simulator with a backend that can hold (Slurm's reservations are tried on the
real Slurm: test_slurm_requests_on_slurm.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from clusters.backends import registry
from clusters.backends.simulated import SimulatedCluster
from remediation import services
from remediation.engine import Engine
from remediation.models import Action, Mode, Remediation, Trigger
from remediation.steps.holds import HOLD_KEY
from remediation.transitions import RunStatus


class HoldingCluster(SimulatedCluster):
    """The simulator, with Slurm's maintenance reservations as a set of nodes."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.held: set[str] = set()
        self.history: list[str] = []

    def hold_for_checks(self, node):
        self.held.add(node)
        self.history.append(f"hold {node}")

    def release_checks_hold(self, node):
        self.held.discard(node)
        self.history.append(f"release {node}")

    def checks_holds(self):
        return sorted(self.held)


@pytest.fixture
def sim():
    simulator = HoldingCluster.standard(train=4, infer=1, spare=2, seed=7)
    simulator.fault_rate_per_gpu_day = 0
    registry.use(simulator)
    yield simulator
    registry.use(None)


def drive(engine, sim, synced, rounds=20):
    for _ in range(rounds):
        engine.run_once()
        synced(timedelta(seconds=1))
        Remediation.objects.filter(status=RunStatus.WAITING).update(due_at=timezone.now())
        if not Remediation.objects.filter(status__in=[RunStatus.RUNNING, RunStatus.WAITING]):
            return


def test_a_replacement_is_held_from_before_the_swap_until_it_passes(sim, synced, node):
    seen = []

    def validator(backend, target):
        seen.append((target, sorted(sim.held)))
        return True, "healthy"

    run = services.create_run(
        node("gpu-02"), Action.REPLACE, trigger=Trigger.ADMIN, reason="t", mode=Mode.AUTOMATIC
    )
    drive(Engine("t", backend=sim, fleet=sim, validator=validator), sim, synced)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.message
    spare = run.context["replacement"]
    assert seen == [(spare, [spare])], "held while it was checked"
    assert sim.history == [f"hold {spare}", f"release {spare}"], "held before the swap"
    assert HOLD_KEY not in run.context and sim.held == set()
    assert (
        "passed validation in a maintenance reservation" in run.steps.get(name="validate").message
    )


def test_a_rebooted_node_that_fails_its_checks_stays_drained_naming_the_check(sim, synced, node):
    def validator(backend, target):
        return False, "medbay-agent check: nvlink: NVLink down: GPU 0 link 1"

    run = services.create_run(
        node("gpu-03"), Action.REBOOT, trigger=Trigger.ADMIN, reason="t", mode=Mode.AUTOMATIC,
        context={"grace_s": 0},
    )  # fmt: skip
    engine = Engine("t", backend=sim, fleet=sim, validator=validator)
    drive(engine, sim, synced, rounds=10)
    Remediation.objects.filter(pk=run.pk).update(
        context={
            **Remediation.objects.get(pk=run.pk).context,
            "validate_started_at": "2000-01-01T00:00:00+00:00",
        }
    )
    drive(engine, sim, synced, rounds=5)
    run.refresh_from_db()
    assert run.status == RunStatus.NEEDS_ATTENTION, run.message
    info = {i.name: i for i in sim.nodes()}["gpu-03"]
    assert "drain" in info.flags
    assert "NVLink down: GPU 0 link 1" in info.reason and f"[run {run.pk}]" in info.reason
    assert sim.history[0] == "hold gpu-03", "held before the reboot"
    assert sim.held == set(), "the hold is let go with the node drained"


def test_a_worker_sweeps_holds_no_active_run_names(sim, synced, node):
    sim.hold_for_checks("gpu-06")
    run = services.create_run(
        node("gpu-02"), Action.REPLACE, trigger=Trigger.ADMIN, reason="t", mode=Mode.APPROVAL,
        context={HOLD_KEY: "gpu-07"},
    )  # fmt: skip
    sim.hold_for_checks("gpu-07")
    engine = Engine("t", backend=sim, fleet=sim)
    assert engine.release_stranded_holds() == ["gpu-06"], "gpu-07 is run's, still active"
    services.transition(run, RunStatus.REJECTED, message="no")
    assert engine.release_stranded_holds() == ["gpu-07"]
