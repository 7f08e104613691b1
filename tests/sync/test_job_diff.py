"""The job diff writes exactly what Slurm changed, whichever column it is, and
nothing when nothing changed (on PostgreSQL it compares one digest per job)."""

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from clusters.backends.base import JobInfo
from jobs.models import Job, JobStateChange
from sync.cycle import apply_snapshot

START = datetime(2026, 11, 29, 8, 0, 0, 123456, tzinfo=UTC)
# Every column filled, and the characters most likely to upset a text digest.
FULL = JobInfo(
    job_id=41,
    name='llama-70b "pretrain",\\ täglich 訓練',
    user="alice",
    account="research",
    partition="train",
    state="RUNNING",
    reason="None",
    nodes=("gpu-01", "gpu-02"),
    node_count=2,
    gpus=16,
    submit_time=START.replace(microsecond=0),
    start_time=START,
    end_time=None,
    eligible_time=START.replace(microsecond=0),
    restart_count=0,
    requeue=True,
    exit_code=None,
    time_limit_minutes=600,
)
SPARSE = JobInfo(job_id=42, name="", user="bob", state="PENDING", reason="Priority")
CHANGES = {
    "name": {"name": "llama-70b-2"},
    "user": {"user": "carol"},
    "account": {"account": "infra"},
    "partition": {"partition": "infer"},
    "state": {"state": "COMPLETING"},
    "reason": {"reason": "Resources"},
    "node_names": {"nodes": ("gpu-01", "gpu-03")},
    "node_count": {"node_count": 3},
    "gpus": {"gpus": 24},
    "start_at": {"start_time": START.replace(microsecond=123457)},
    # Slurm's EndTime of a running job is its time limit's end: kept once it ended.
    "end_at": {"end_time": START.replace(hour=9), "state": "COMPLETED"},
    "eligible_at": {"eligible_time": None},
    "restart_count": {"restart_count": 1},
    "requeue": {"requeue": False},
    "exit_code": {"exit_code": 0},
    "time_limit_minutes": {"time_limit_minutes": None},
}


@pytest.fixture
def stored(cluster):
    apply_snapshot(cluster, [], [], [FULL, SPARSE])
    return cluster


def test_an_unchanged_snapshot_reads_no_job_twice_and_writes_nothing(stored):
    history = JobStateChange.objects.count()
    with CaptureQueriesContext(connection) as captured:
        result = apply_snapshot(stored, [], [], [FULL, SPARSE])
    assert result.jobs_changed == []
    assert JobStateChange.objects.count() == history
    job_reads = [q["sql"] for q in captured if 'FROM "jobs_job" ' in q["sql"]]
    assert len(job_reads) == 1, job_reads


@pytest.mark.parametrize("column", sorted(CHANGES))
def test_a_change_in_any_synced_column_is_written(stored, column):
    changed = replace(FULL, **CHANGES[column])
    result = apply_snapshot(stored, [], [], [changed, SPARSE])
    job = Job.objects.get(slurm_id=41)
    assert result.jobs_changed == [job.pk]
    expected = CHANGES[column]
    if column == "node_names":
        assert job.node_names == list(expected["nodes"])
    else:
        assert getattr(job, column) == next(iter(expected.values()))
    assert Job.objects.get(slurm_id=42).updated_at < job.updated_at


@pytest.mark.parametrize(
    "nodes",
    [("gpu-01",), ("a", "b"), ('a", "b',), ("gpu\\01",), ("knoten-ü",), ("a,b", "c")],
)
def test_node_lists_that_print_alike_are_still_told_apart(stored, nodes):
    before = replace(FULL, nodes=nodes)
    apply_snapshot(stored, [], [], [before, SPARSE])
    after = replace(FULL, nodes=("a", "b"))
    result = apply_snapshot(stored, [], [], [after, SPARSE])
    job = Job.objects.get(slurm_id=41)
    assert job.node_names == ["a", "b"]
    assert result.jobs_changed == ([] if nodes == ("a", "b") else [job.pk])


def test_a_requeue_keeps_the_original_submit_time(stored):
    requeued = replace(FULL, state="PENDING", submit_time=START.replace(hour=10), restart_count=1)
    apply_snapshot(stored, [], [], [requeued, SPARSE])
    assert Job.objects.get(slurm_id=41).submit_at == FULL.submit_time


def test_slurms_estimates_are_not_taken_for_start_and_end_times(stored):
    estimated = replace(FULL, end_time=START.replace(hour=18))
    apply_snapshot(stored, [], [], [estimated, SPARSE])
    assert Job.objects.get(slurm_id=41).end_at is None
    waiting = replace(FULL, state="PENDING", start_time=START.replace(hour=20), restart_count=1)
    apply_snapshot(stored, [], [], [waiting, SPARSE])
    assert Job.objects.get(slurm_id=41).start_at is None


def test_a_requeue_seen_through_completing_and_pending_is_one_restart(stored):
    for state, restarts in (("PENDING", 1), ("COMPLETING", 1), ("PENDING", 1), ("RUNNING", 1)):
        apply_snapshot(stored, [], [], [replace(FULL, state=state, restart_count=restarts), SPARSE])
    rows = JobStateChange.objects.filter(job__slurm_id=41, reason__startswith="requeued")
    assert list(rows.values_list("from_state", "to_state", "node_names")) == [
        ("RUNNING", "PENDING", ["gpu-01", "gpu-02"])
    ]


def test_a_row_changed_outside_the_sync_is_set_back_even_when_slurm_printed_the_same_job(stored):
    # The parsers hand back the same JobInfo for a record Slurm printed unchanged, and
    # the sync reuses that job's key from the last cycle: the stored side is still read.
    Job.objects.filter(slurm_id=41).update(name="renamed by hand", gpus=1)
    result = apply_snapshot(stored, [], [], [FULL, SPARSE])
    job = Job.objects.get(slurm_id=41)
    assert (job.name, job.gpus) == (FULL.name, 16)
    assert result.jobs_changed == [job.pk]
    assert apply_snapshot(stored, [], [], [FULL, SPARSE]).jobs_changed == []
