"""`make demo` shows demand at work: within a few minutes a proposal with its evidence."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from clusters.backends import registry
from clusters.models import Cluster
from demand.models import DemandDecision
from demand.periodic import tick
from demo.demand import create_demo_policy
from demo.management.commands.demo import _build_simulator
from demo.simulation import SimulationLoop, WallClockDemand
from identity.accounts import create_demo_users
from remediation.models import Remediation, Trigger
from remediation.transitions import RunStatus

pytestmark = pytest.mark.django_db


def test_a_demand_proposal_with_its_evidence_is_waiting_within_a_few_minutes_of_the_demo():
    options = {"nodes": 32, "seed": 42, "time_scale": 60.0, "fault_boost": 0.0}
    sim = _build_simulator(options)
    cluster = Cluster.objects.create(name="demo", backend="simulated")
    registry.use(sim)
    try:
        loop = SimulationLoop(sim, cluster)
        loop.warm_up(timedelta(minutes=30))
        create_demo_users()
        create_demo_policy(cluster)
        started = timezone.now()
        # Each minute of ours is an hour of the simulator's (time scale 60).
        for minute in range(6):
            loop.step(timedelta(hours=1) if minute else timedelta(0))
            tick(cluster, WallClockDemand(loop), sim, now=started + timedelta(minutes=minute))
            if Remediation.objects.filter(trigger=Trigger.DEMAND).exists():
                break
    finally:
        registry.use(None)

    run = Remediation.objects.get(trigger=Trigger.DEMAND)
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert run.context["demand"]["sentence"]
    proposed = DemandDecision.objects.filter(outcome="proposed")
    assert any(run.pk in decision.runs for decision in proposed)
    assert minute <= 5, "no proposal within five minutes of the demo's start"
