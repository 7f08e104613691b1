"""Restarts are detected on Slurm's own output: 22.05 text and JSON, 24.11 JSON."""

import json
from datetime import UTC

import pytest

from clusters.backends.slurm_parsers import (
    parse_jobs_json,
    parse_nodes_json,
    parse_scontrol_jobs,
    parse_scontrol_nodes,
    parse_scontrol_partitions,
)
from jobs.models import Job, JobStateChange
from sync.cycle import apply_snapshot

from .fakes import SAMPLES_22_05, SAMPLES_24_11


def read(path) -> str:
    return path.read_text()


@pytest.fixture
def snapshot_22_05():
    partitions = parse_scontrol_partitions(read(SAMPLES_22_05 / "scontrol_show_partition.txt"))
    nodes = parse_scontrol_nodes(read(SAMPLES_22_05 / "scontrol_show_node_all.txt"), UTC)
    return partitions, nodes


def steps(job_id: int) -> list[tuple[str, str, str, int]]:
    return list(
        JobStateChange.objects.filter(job__slurm_id=job_id)
        .order_by("id")
        .values_list("from_state", "to_state", "reason", "restart_count")
    )


def test_a_22_05_text_job_requeued_and_running_again_between_two_polls_counts_one_restart(
    cluster, snapshot_22_05
):
    requeued_text = read(SAMPLES_22_05 / "scontrol_show_job_3_running_2node_requeued.txt")
    first_run = parse_scontrol_jobs(requeued_text.replace("Restarts=1", "Restarts=0"), UTC)
    apply_snapshot(cluster, *snapshot_22_05, first_run)
    result = apply_snapshot(cluster, *snapshot_22_05, parse_scontrol_jobs(requeued_text, UTC))
    assert result.restarts == [3]
    job = Job.objects.get(slurm_id=3)
    assert (job.state, job.restart_count, job.gpus) == ("RUNNING", 1, 16)
    assert steps(3)[1:] == [
        ("RUNNING", "PENDING", "requeued (restart 1)", 1),
        ("PENDING", "RUNNING", "", 1),
    ]


def test_a_22_05_squeue_json_restart_count_increase_is_a_restart(cluster, snapshot_22_05):
    document = json.loads(read(SAMPLES_22_05 / "squeue.json"))
    before = json.loads(json.dumps(document))
    for raw in before["jobs"]:
        raw["restart_cnt"] = 0
    apply_snapshot(cluster, *snapshot_22_05, parse_jobs_json(before))
    result = apply_snapshot(cluster, *snapshot_22_05, parse_jobs_json(document))
    assert result.restarts == [3]
    assert JobStateChange.objects.filter(reason="requeued (restart 1)").count() == 1


def test_a_24_11_requeue_is_recorded_once_through_pending_and_running_again(cluster):
    nodes = parse_nodes_json(json.loads(read(SAMPLES_24_11 / "scontrol_show_node.json")))
    partitions = parse_scontrol_partitions(read(SAMPLES_24_11 / "scontrol_show_partition.txt"))
    polls = [
        "scontrol_show_job.json",
        "requeue/scontrol_show_job_5_after_requeue.json",
        "requeue/scontrol_show_job_5_after_requeue_restarted.json",
    ]
    restarts = []
    for name in polls:
        jobs = parse_jobs_json(json.loads(read(SAMPLES_24_11 / name)))
        job_5 = [job for job in jobs if job.job_id == 5]
        restarts.append(apply_snapshot(cluster, partitions, nodes, job_5).restarts)
    assert restarts == [[], [5], []]
    assert [step[:2] for step in steps(5)] == [
        ("", "RUNNING"),
        ("RUNNING", "PENDING"),
        ("PENDING", "RUNNING"),
    ]
    assert steps(5)[1][2:] == ("requeued (restart 1)", 1)
    job = Job.objects.get(slurm_id=5)
    assert (job.state, job.restart_count, job.node_names) == ("RUNNING", 1, ["tx-01"])
    assert list(job.nodes.values_list("name", flat=True)) == ["tx-01"]
