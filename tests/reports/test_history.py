"""`demo --history-days` writes a realistic, deterministic past that the reports can read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command

pytestmark = pytest.mark.django_db

END = datetime(2026, 3, 1, tzinfo=UTC)


def cluster_with_nodes(name: str):
    from clusters.backends.simulated import SimulatedCluster
    from clusters.models import Cluster
    from sync.cycle import apply_snapshot

    cluster = Cluster.objects.create(name=name)
    sim = SimulatedCluster.standard(train=6, infer=1, spare=1, seed=1, prefix=name)
    apply_snapshot(cluster, sim.partitions(), sim.nodes(), sim.jobs(), now=END)
    return cluster


def timeline(cluster) -> list[tuple]:
    from clusters.models import NodeStateChange
    from jobs.models import JobStateChange

    nodes = NodeStateChange.objects.filter(node__cluster=cluster, actor="history")
    jobs = JobStateChange.objects.filter(job__cluster=cluster)
    return [
        *nodes.order_by("at", "id").values_list("node__name", "to_status", "at"),
        *jobs.order_by("at", "id").values_list("job__slurm_id", "to_state", "at"),
    ]


def test_history_is_deterministic_under_the_seed_and_ends_where_live_history_begins():
    from demo.past import generate_history

    first, second = cluster_with_nodes("a"), cluster_with_nodes("b")
    stats = generate_history(first, 20, seed=9, fault_rate_per_gpu_day=0.01)
    assert stats == generate_history(second, 20, seed=9, fault_rate_per_gpu_day=0.01)
    assert stats.jobs > 50 and stats.faults > 0 and stats.remediations > 0
    rows = timeline(first)
    assert [row[1:] for row in rows] == [row[1:] for row in timeline(second)]
    assert min(row[2] for row in rows) == END - timedelta(days=20)
    assert max(row[2] for row in rows) <= END


def test_generated_faults_interrupt_jobs_and_leave_checkpoints_for_goodput():
    from demo.past import generate_history
    from jobs.models import Job, JobProgress
    from remediation.models import Remediation

    cluster = cluster_with_nodes("c")
    generate_history(cluster, 30, seed=4, fault_rate_per_gpu_day=0.02)
    assert Job.objects.filter(cluster=cluster, restart_count__gt=0).exists()
    assert JobProgress.objects.filter(job__cluster=cluster, checkpoint_saved=True).exists()
    run = Remediation.objects.filter(node__cluster=cluster).first()
    assert run.action == "replace" and run.finished_at - run.created_at < timedelta(minutes=10)


def test_demo_with_history_days_fills_the_reports_once():
    from django.contrib.auth import get_user_model
    from django.test import Client

    from clusters.backends import registry
    from jobs.models import Job

    try:
        call_command("demo", "--no-serve", "--nodes", "8", "--history-days", "7", "--seed", "3")
        count = Job.objects.count()
        call_command("demo", "--no-serve", "--nodes", "8", "--history-days", "7", "--seed", "3")
        assert Job.objects.count() == count  # a restarted demo does not write it twice
    finally:
        registry.use(None)
    client = Client()
    # The demo creates its users (a manager among them) with fresh passwords.
    client.force_login(get_user_model().objects.get(username="manager"))
    body = client.get("/api/v1/reports/utilization/", {"group_by": "week"}).json()
    assert body["summary"]["allocated_gpu_h"] > 0
    assert 0 < body["summary"]["utilization_pct"] <= 100


def test_generated_runs_leave_the_rows_the_engine_leaves():
    """Status changes and one row per planned step, as a run that went straight through."""
    from demo.past import generate_history
    from remediation.models import Remediation
    from remediation.plans import plan_for

    cluster = cluster_with_nodes("d")
    generate_history(cluster, 30, seed=4, fault_rate_per_gpu_day=0.02)
    run = Remediation.objects.filter(node__cluster=cluster).first()

    history = run.status_changes.order_by("at", "id").values_list("from_status", "to_status")
    assert list(history) == [("", "running"), ("running", "succeeded")]
    steps = run.steps.order_by("index")
    assert [step.name for step in steps] == plan_for("replace") == run.planned_steps
    assert {step.outcome for step in steps} == {"succeeded"}
    assert steps.first().started_at == run.created_at
    assert steps.last().finished_at == run.finished_at


def test_each_generated_requeue_is_an_accounting_attempt_and_a_runs_record_of_the_job():
    """What made the Accounting tab print 0.0 GPU-h of requeued attempts beside 12
    restarts, and ETTR 0.0 GPU-h of node replacement after 26 replacements."""
    from demo.past import generate_history
    from jobs.models import AccountingJob, Job
    from remediation.models import RemediationJob

    cluster = cluster_with_nodes("d")
    generate_history(cluster, 30, seed=4, fault_rate_per_gpu_day=0.02)
    restarted = Job.objects.filter(cluster=cluster, restart_count__gt=0)
    restarts = sum(restarted.values_list("restart_count", flat=True))
    assert restarts > 0
    requeued = AccountingJob.objects.filter(cluster=cluster, state="REQUEUED")
    assert requeued.count() == restarts
    # Each attempt is its own record: the final one starts when the job last ran.
    for job in restarted:
        attempts = AccountingJob.objects.filter(cluster=cluster, slurm_id=job.slurm_id)
        assert attempts.count() == job.restart_count + 1
        last_start = job.state_changes.filter(to_state="RUNNING").order_by("at").last().at
        assert attempts.exclude(state="REQUEUED").get().start_at == last_start
    effects = RemediationJob.objects.filter(remediation__node__cluster=cluster)
    assert set(effects.values_list("slurm_job_id", flat=True)) == set(
        restarted.values_list("slurm_id", flat=True)
    )
