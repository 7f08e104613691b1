"""GPUs follow demand on the real local Slurm (22.05 here; 24.11 and 26.05 in
`make test-slurm-versions`), with the inference load from Debian's real Prometheus.

The minicluster's `train` partition is made fully busy and a 1-node training job waits,
while the `infer` partition has an idle node to lend (an admin first moves the spare
gpu-06 into `infer`: with one inference node the load always needs it). The sync
samples the demand every second and its decision pass (`decide_cluster`) proposes a
to_training move with its evidence; an admin reads the evidence on the approval page
and approves; the engine moves the node in Slurm and the waiting job starts there.
Then the serving latency rises over its target: the policy, now automatic, sends the
node back to `infer`, which drains it and waits for its job to end first.

The test drives the sync and the engine itself (`sync_once`, `Engine.run_once`), as
tests/remediation/test_slurm_requests_on_slurm.py does; the cluster goes back to its
known state (tests/plugins/cluster_state.py) after it.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from clusters.backends.base import JobSubmission
from clusters.backends.slurm_spares import SlurmSparesFleet
from clusters.models import Cluster, NodePool, Partition
from demand.models import DemandDecision, ReallocationPolicy
from demand.policies import save_policy
from demand.prometheus import query_value
from remediation.engine import Engine
from remediation.models import Remediation, Trigger
from remediation.transitions import RunStatus
from sync.cycle import sync_once
from tests.demand.prometheus_server import SERVING_JOB, ready
from tests.waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_versions, pytest.mark.django_db]

LATENCY_QUERY = f'max(serve_p95_latency_ms{{job="{SERVING_JOB}"}})'
LENT = "gpu-06"  # the spare an admin puts in `infer` for the test; the node that moves
TRAIN = ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]

# Every training node busy for longer than the waiting job will run, so the engine's
# drain of the lent node is the one that waits for a job.
FILLER = """#!/bin/bash
#SBATCH --job-name=fill-train
#SBATCH --output=/dev/null
#SBATCH --partition=train
#SBATCH --nodes=4
#SBATCH --gres=gpu:8
#SBATCH --time=30
sleep 1800
"""
# The training job that waits: it runs until the test lets it finish, as a real one
# ends by itself (no kill, no requeue).
WAITING = """#!/bin/bash
#SBATCH --job-name=train-waiting
#SBATCH --output=/dev/null
#SBATCH --partition=train
#SBATCH --nodes=1
#SBATCH --gres=gpu:8
#SBATCH --time=10
while [ ! -e {finish} ]; do sleep 0.5; done
"""


def admin_env(slurm) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": slurm.slurm_conf}


def admin_runs(slurm, *command: str) -> str:
    """What an admin types, as root, in a terminal."""
    return subprocess.run(
        command, env=admin_env(slurm), check=True, capture_output=True, text=True
    ).stdout


def squeue_says(slurm, job_id: int) -> str:
    """`squeue` as an admin reads it: the job's state and nodes, e.g. RUNNING gpu-06."""
    return admin_runs(slurm, "squeue", "-h", "-j", str(job_id), "-o", "%T %N").strip()


def node_info(slurm, name: str):
    return {info.name: info for info in slurm.nodes()}[name]


def partition_members(slurm) -> dict[str, set[str]]:
    return {partition.name: set(partition.nodes) for partition in slurm.partitions()}


@pytest.fixture
def lent_inference_node(slurm):
    """The spare gpu-06 in `infer` beside gpu-07, as an admin put it there at runtime
    (the slurm fixture puts the partitions back to slurm.conf afterwards)."""
    spare = [name for name in partition_members(slurm)["spare"] if name != LENT]
    admin_runs(slurm, "scontrol", "update", "partitionname=spare", f"nodes={','.join(spare)}")
    admin_runs(slurm, "scontrol", "update", "partitionname=infer", f"nodes={LENT},gpu-07")
    assert partition_members(slurm)["infer"] == {LENT, "gpu-07"}
    return LENT


@pytest.fixture
def serving_load(prometheus, settings):
    """The site's Prometheus and PromQL query configured, the serving p95 low (100 ms)
    and already scraped; the sync samples the demand every second."""
    url, serving = prometheus
    serving.p95_ms = 100.0
    settings.MEDBAY_DEMAND_PROMETHEUS_URL = url
    settings.MEDBAY_DEMAND_PROMQL = LATENCY_QUERY
    settings.MEDBAY_DEMAND_PROMQL_UNIT = "latency_ms"
    settings.MEDBAY_DEMAND_SAMPLE_S = 1
    wait_for(lambda: ready(url), 60, "Prometheus to be ready")
    scraped(url, 100.0)
    return url, serving


def scraped(url: str, value: float) -> None:
    wait_for(
        lambda: query_value(url, LATENCY_QUERY).value == value,
        60,
        f"Prometheus to scrape a p95 of {value:g} ms",
    )


@pytest.fixture
def cluster(slurm, lent_inference_node, serving_load):
    cluster = Cluster.objects.create(name="minicluster", backend="slurm")
    sync_once(cluster, slurm)
    Partition.objects.filter(cluster=cluster).update(checkpoint_grace_s=0)
    return cluster


def submit(slurm, script: str) -> int:
    return slurm.submit_job(JobSubmission(script=script, user="root"))


def drive_until(engine, cluster, slurm, done, timeout_s: float, what: str):
    """The engine and the sync, each pass (the sync samples and decides when due)."""

    def step():
        if engine is not None:
            engine.run_once()
        sync_once(cluster, slurm)
        return done()

    return wait_for(step, timeout_s, what, interval_s=0.3)


def demand_run(node: str, action: str):
    return lambda: Remediation.objects.filter(
        trigger=Trigger.DEMAND, node__name=node, action=action
    ).first()


def test_an_idle_inference_node_trains_a_waiting_job_and_goes_back_when_serving_needs_it(
    slurm, cluster, serving_load, admin_user, tmp_path
):
    _url, serving = serving_load
    filler = submit(slurm, FILLER)
    wait_for(lambda: slurm.job(filler).state == "RUNNING", 30, "the training partition to fill")
    finish = tmp_path / "finish"
    waiting = submit(slurm, WAITING.format(finish=finish))
    assert squeue_says(slurm, waiting).startswith("PENDING")

    policy = save_policy(
        ReallocationPolicy(
            cluster=cluster,
            training_pool=NodePool.objects.get(cluster=cluster, kind="training"),
            inference_pool=NodePool.objects.get(cluster=cluster, kind="inference"),
            enabled=True,
            mode="approval",
            inference_min_nodes=1,
            inference_max_nodes=2,
            inference_target=300,
            inference_unit="latency_ms",
            training_max_wait_s=5,
            hysteresis_s=2,
            cooldown_s=0,
            stale_after_s=60,
        ),
        user=admin_user,
    )

    # The decision pass proposes lending the idle inference node, with its evidence.
    proposal = drive_until(
        None, cluster, slurm,
        lambda: DemandDecision.objects.filter(policy=policy, outcome="proposed").first(),
        60, "the policy to propose a move to training",
    )  # fmt: skip
    assert proposal.rule == "training_waiting", proposal.sentence
    run = demand_run(LENT, "to_training")()
    assert proposal.moves == {LENT: f"run {run.pk}"}
    assert run.status == RunStatus.AWAITING_APPROVAL
    evidence = run.context["demand"]
    assert evidence["evidence"]["inference_load"] == 100.0
    assert evidence["evidence"]["training_pending_nodes"] == 1
    sentence = evidence["sentence"]
    assert sentence.startswith("inference p95 100 ms < 180 ms (60% of the 300 ms target)")
    assert "training queue 1 job for 1 node" in sentence
    assert "moving 1 node to training (1 idle)" in sentence

    # What the admin sees, and approves, on the approval page.
    admin = Client()
    admin.force_login(admin_user)
    card = admin.get(reverse("remediation-approvals")).content.decode()
    assert escape(sentence) in card
    page = admin.get(reverse("remediation-detail", args=[run.pk])).content.decode()
    assert escape(sentence) in page
    answer = admin.post(
        reverse("remediation-decide", args=[run.pk, "approve"]), {"comment": "lend it"}
    )
    assert answer.status_code == 302

    engine = Engine("demand", backend=slurm, fleet=SlurmSparesFleet(slurm))
    drive_until(
        engine, cluster, slurm,
        lambda: Remediation.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED,
        60, "the move to training to finish",
    )  # fmt: skip
    members = partition_members(slurm)
    assert members["train"] == {*TRAIN, LENT} and members["infer"] == {"gpu-07"}
    wait_for(
        lambda: squeue_says(slurm, waiting) == f"RUNNING {LENT}",
        30,
        f"the waiting job to run on {LENT}",
        explain=lambda: squeue_says(slurm, waiting),
    )

    # The serving latency rises over its target; the admin lets the policy move by itself.
    serving.p95_ms = 400.0
    scraped(serving_load[0], 400.0)
    policy.mode = "automatic"
    save_policy(policy, user=admin_user)
    back = drive_until(
        engine, cluster, slurm,
        lambda: (found := demand_run(LENT, "to_inference")()) and
        found.step_name == "wait_drained" and found,
        60, f"the policy to send {LENT} back and wait for its job",
    )  # fmt: skip
    sentence = back.context["demand"]["sentence"]
    assert back.context["demand"]["rule"] == "inference_over_target"
    assert sentence.startswith("inference p95 400 ms > target 300 ms for "), sentence
    assert "moving 1 node to inference (1 moving when their jobs end)" in sentence
    assert "drain" in node_info(slurm, LENT).flags, "no new job lands on the node while it waits"
    assert squeue_says(slurm, waiting) == f"RUNNING {LENT}", "the job is not killed"
    page = admin.get(reverse("remediation-detail", args=[back.pk])).content.decode()
    assert escape(sentence) in page

    finish.touch()  # the job ends by itself
    drive_until(
        engine, cluster, slurm,
        lambda: Remediation.objects.get(pk=back.pk).status == RunStatus.SUCCEEDED,
        60, f"{LENT} to go back to inference",
    )  # fmt: skip
    assert slurm.job(waiting).state == "COMPLETED"
    members = partition_members(slurm)
    assert members["infer"] == {LENT, "gpu-07"} and members["train"] == set(TRAIN)
    # 22.05 marks a resumed node not responding until its slurmd answers a ping.
    wait_for(
        lambda: (lambda n: n.state == "idle" and not n.flags)(node_info(slurm, LENT)),
        30,
        f"{LENT} to serve again (idle, no flag)",
        explain=lambda: node_info(slurm, LENT),
    )
