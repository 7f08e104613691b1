from __future__ import annotations

import html
from datetime import UTC, datetime

import pytest

from jobs.live import publish_jobs
from jobs.models import Job

pytestmark = pytest.mark.django_db


def make_job(cluster, slurm_id, **fields):
    return Job.objects.create(cluster=cluster, slurm_id=slurm_id, **fields)


@pytest.mark.parametrize(
    ("reason", "words"),
    [
        ("Priority", "waiting: other jobs have higher priority"),
        ("Resources", "waiting for free nodes or GPUs"),
        ("Dependency", "waiting for the jobs it depends on to finish"),
        ("JobHeldAdmin", "held by an admin; ask them to release it"),
        ("JobHeldUser", "held by you; release it to let it start"),
        ("ReqNodeNotAvail, UnavailableNodes:gpu-02", "waiting: a node it needs is down"),
        ("PartitionTimeLimit", "its time limit is above the partition's maximum"),
        ("QOSMaxGRESPerUser", "waiting: you are using your QOS's maximum number of GPUs"),
    ],
)
def test_pending_reasons_are_shown_in_plain_words(login, researcher, cluster, reason, words):
    make_job(cluster, 7, user="alice", state="PENDING", reason=reason)

    page = html.unescape(login(researcher).get("/jobs/").content.decode())

    assert words in page


def test_a_requeued_job_says_when_it_may_start(login, researcher, cluster):
    eligible = datetime(2026, 3, 1, 10, 7, tzinfo=UTC)
    make_job(
        cluster, 8, user="alice", state="PENDING", reason="BeginTime", restart_count=1,
        eligible_at=eligible,
    )  # fmt: skip

    api = login(researcher).get("/api/v1/jobs/8/").json()

    assert api["reason_text"] == "waiting: the job was requeued and may start at 10:07"


def test_the_queue_filters_by_state_partition_and_user(login, manager, cluster):
    make_job(cluster, 1, user="alice", state="RUNNING", partition="train")
    make_job(cluster, 2, user="bob", state="PENDING", partition="train")
    make_job(cluster, 3, user="bob", state="RUNNING", partition="infer")
    client = login(manager)

    def ids(query):
        return [job["id"] for job in client.get(f"/api/v1/jobs/?{query}").json()["results"]]

    assert ids("state=RUNNING") == [3, 1]
    assert ids("partition=train&user=bob") == [2]
    page = client.get("/jobs/?state=RUNNING&partition=infer").content.decode()
    assert 'id="job-3"' in page and 'id="job-1"' not in page


def test_the_queue_page_subscribes_to_live_job_updates(login, researcher, cluster):
    page = login(researcher).get("/jobs/").content.decode()

    assert "topics=jobs" in page


def test_the_queue_page_query_count_does_not_grow_with_the_jobs(
    login, manager, cluster, django_assert_max_num_queries
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client = login(manager)
    for slurm_id in range(1, 4):
        make_job(cluster, slurm_id, user="alice", state="RUNNING", restart_count=1)
    with CaptureQueriesContext(connection) as few:
        client.get("/jobs/")
    for slurm_id in range(4, 40):
        make_job(cluster, slurm_id, user="alice", state="PENDING", reason="Priority")

    # Lost work takes three queries for the whole page, restarted jobs or not.
    with django_assert_max_num_queries(len(few)):
        response = client.get("/jobs/")

    assert response.content.decode().count('<tr id="job-') == 39


def rows_region(client, query=""):
    """What an open queue fetches when it is poked: its own rows, with its own filters."""
    return client.get(
        f"/jobs/{query}", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="job-rows"
    ).content.decode()


def test_the_live_region_returns_the_rows_alone_with_their_ids_and_plain_reasons(
    login, researcher, cluster
):
    make_job(cluster, 42, user="alice", state="PENDING", reason="Resources")

    region = rows_region(login(researcher))

    assert region.lstrip().startswith('<tr id="job-42"')
    assert "<table" not in region and "hx-swap-oob" not in region
    assert "waiting for free nodes or GPUs" in html.unescape(region)


def test_a_filtered_queue_gains_a_new_matching_row_and_loses_one_that_stopped_matching(
    login, researcher, cluster
):
    client = login(researcher)
    running = make_job(cluster, 43, user="alice", state="RUNNING")
    make_job(cluster, 44, user="alice", state="RUNNING")
    assert 'id="job-43"' in rows_region(client, "?state=RUNNING")

    Job.objects.filter(pk=running.pk).update(state="COMPLETED")
    new = make_job(cluster, 45, user="alice", state="RUNNING")
    publish_jobs([running.pk, new.pk], [new.pk])  # what the sync does on commit
    region = rows_region(client, "?state=RUNNING")

    assert 'id="job-43"' not in region
    assert region.index('id="job-45"') < region.index('id="job-44"')  # in its place
