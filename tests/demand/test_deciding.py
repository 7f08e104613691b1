"""The decision pass: sampled demand -> the rules' verdict -> demand runs through the engine."""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest

from clusters.backends.base import JobSubmission
from clusters.backends.simulated import InferenceCurve
from clusters.models import Node
from demand.models import DecisionOutcome, DemandDecision, DemandSample
from demand.periodic import tick
from remediation import actions
from remediation.engine import Engine
from remediation.models import Action, BreakerRefusal, Remediation, Trigger
from remediation.transitions import RunStatus
from tests.conftest import _user

pytestmark = pytest.mark.django_db

ONE_NODE = "#!/bin/bash\n#SBATCH --partition=train\n#SBATCH --nodes=1\n#SBATCH --gres=gpu:8\nx\n"
FOUR_NODES = "#!/bin/bash\n#SBATCH --partition=train\n#SBATCH --nodes=4\n#SBATCH --gres=gpu:8\nx\n"
QUIET = InferenceCurve(trough_nodes=0.2)  # p95 about 110 ms on two nodes
BUSY = InferenceCurve(trough_nodes=1.9)  # p95 about 2 s on two nodes


@pytest.fixture
def training_waits(demand_sim, resync):
    """All four training nodes busy and a one-node job waiting ten minutes behind them."""
    demand_sim.submit_job(JobSubmission(script=FOUR_NODES, user="alice"))
    resync(timedelta(seconds=1))
    waiting = demand_sim.submit_job(JobSubmission(script=ONE_NODE, user="bob"))
    resync(timedelta(minutes=10))
    return waiting


def decide_now(cluster, sim):
    return tick(cluster, sim, sim, now=sim.now)


def demand_runs():
    return Remediation.objects.filter(trigger=Trigger.DEMAND).select_related("node")


def test_an_approval_policy_proposes_an_idle_inference_node_for_waiting_training(
    demand_sim, cluster, make_policy, training_waits
):
    demand_sim.demand_mode(QUIET)
    make_policy()

    decide_now(cluster, demand_sim)

    (run,) = demand_runs()
    assert (run.action, run.status) == (Action.TO_TRAINING, RunStatus.AWAITING_APPROVAL)
    assert run.node.pool.kind == "inference"
    evidence = run.context["demand"]
    assert evidence["rule"] == "training_waiting"
    assert "training queue 1 job for 1 node" in evidence["sentence"]
    assert "inference p95" in evidence["sentence"]
    assert evidence["evidence"]["training_pending_nodes"] == 1
    (decision,) = DemandDecision.objects.all()
    assert decision.outcome == DecisionOutcome.PROPOSED
    assert decision.runs == [run.pk]


def test_a_policy_is_off_by_default_and_moves_nothing(demand_sim, cluster, make_policy):
    from demand.models import ReallocationPolicy

    assert ReallocationPolicy._meta.get_field("enabled").default is False
    demand_sim.demand_mode(QUIET)
    make_policy(enabled=False)

    decide_now(cluster, demand_sim)

    assert DemandSample.objects.exists()  # the signals are still recorded
    assert not demand_runs().exists()
    assert not DemandDecision.objects.exists()


def test_a_proposal_waiting_for_approval_is_not_proposed_again(
    demand_sim, cluster, make_policy, training_waits, resync
):
    demand_sim.demand_mode(QUIET)
    make_policy()
    decide_now(cluster, demand_sim)

    resync(timedelta(minutes=2))
    decide_now(cluster, demand_sim)

    assert demand_runs().count() == 1


def test_approving_the_proposal_moves_the_node_and_the_waiting_job_starts_on_it(
    demand_sim, cluster, make_policy, training_waits, resync, admin_user
):
    demand_sim.demand_mode(QUIET)
    make_policy()
    decide_now(cluster, demand_sim)
    (run,) = demand_runs()

    actions.approve(run, _user("second", "admin"))
    engine = Engine("test", backend=demand_sim, fleet=demand_sim)
    for _ in range(10):
        engine.run_once()
        resync(timedelta(seconds=5))

    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    node = Node.objects.select_related("pool").get(pk=run.node_id)
    assert node.pool.kind == "training"
    assert demand_sim.job(training_waits).nodes == [node.name]


def test_inference_over_its_target_takes_an_idle_training_node(
    demand_sim, cluster, make_policy, resync
):
    demand_sim.demand_mode(BUSY)
    make_policy(training_min_nodes=3)

    decide_now(cluster, demand_sim)

    (run,) = demand_runs()  # the training minimum leaves one node to lend
    assert (run.action, run.node.pool.kind) == (Action.TO_INFERENCE, "training")
    assert run.context["demand"]["rule"] == "inference_over_target"
    assert "> target 300 ms" in run.context["demand"]["sentence"]


def test_prometheus_down_holds_and_the_policy_says_why(
    settings, demand_sim, cluster, make_policy, training_waits
):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    settings.MEDBAY_DEMAND_PROMETHEUS_URL, settings.MEDBAY_DEMAND_PROMQL = url, "serve_p95_ms"
    settings.MEDBAY_DEMAND_PROMETHEUS_TIMEOUT_S = 1
    policy = make_policy()

    decide_now(cluster, demand_sim)

    assert not demand_runs().exists()
    policy.refresh_from_db()
    assert policy.checked_rule == "hold_missing_signal"
    assert policy.checked_sentence.startswith("holding, no data: inference load: Prometheus at")
    (decision,) = DemandDecision.objects.all()
    assert decision.outcome == DecisionOutcome.HELD


def test_a_steady_hold_is_recorded_once_and_confirmed_on_the_policy(
    demand_sim, cluster, make_policy, resync
):
    demand_sim.demand_mode(QUIET)  # nothing waits in training: balanced
    policy = make_policy()
    decide_now(cluster, demand_sim)
    first = policy.__class__.objects.get(pk=policy.pk).checked_at

    resync(timedelta(minutes=5))
    decide_now(cluster, demand_sim)

    assert DemandDecision.objects.count() == 1
    assert policy.__class__.objects.get(pk=policy.pk).checked_at > first


def test_an_automatic_move_asks_the_circuit_breaker_first(
    settings, demand_sim, cluster, make_policy
):
    settings.MEDBAY_BREAKER_MAX_NODES = 0  # the cluster-wide limit: already reached
    demand_sim.demand_mode(BUSY)
    make_policy(mode="automatic")

    decide_now(cluster, demand_sim)

    assert not demand_runs().exists()
    (decision,) = DemandDecision.objects.all()
    assert decision.outcome == DecisionOutcome.REFUSED
    assert "circuit breaker open" in decision.sentence
    assert BreakerRefusal.objects.filter(action=Action.TO_INFERENCE).exists()


def test_an_automatic_move_starts_running_at_once(demand_sim, cluster, make_policy):
    demand_sim.demand_mode(BUSY)
    make_policy(mode="automatic", training_min_nodes=3)

    decide_now(cluster, demand_sim)

    (run,) = demand_runs()
    assert run.status == RunStatus.RUNNING
    assert DemandDecision.objects.get().outcome == DecisionOutcome.MOVED


def test_sampling_waits_for_its_interval(settings, demand_sim, cluster, resync):
    settings.MEDBAY_DEMAND_SAMPLE_S = 60
    assert decide_now(cluster, demand_sim) is True
    resync(timedelta(seconds=20))
    assert decide_now(cluster, demand_sim) is False
    resync(timedelta(seconds=41))
    assert decide_now(cluster, demand_sim) is True
