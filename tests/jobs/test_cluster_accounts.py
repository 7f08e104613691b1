"""The job form offers the clusters where the researcher has a Unix account, and
nothing else; a job sent to another cluster is refused with the field named."""

from __future__ import annotations

import pytest

from clusters.backends import registry
from clusters.config import ClusterConfig
from clusters.configure import add_cluster
from jobs.models import ClusterAccount, Job
from sync.cycle import apply_snapshot


@pytest.fixture
def second(synced):
    cluster = add_cluster("second", ClusterConfig(), by="test")
    backend = registry.backend_for(cluster)
    backend.fault_rate_per_gpu_day = 0
    apply_snapshot(cluster, backend.partitions(), backend.nodes(), backend.jobs())
    cluster.sim = backend
    return cluster


def cluster_options(page: str) -> list[str]:
    select = page.split('name="cluster"', 1)[1].split("</select>", 1)[0]
    return [part.split('"', 1)[0] for part in select.split('<option value="')[1:]]


def test_the_form_offers_only_the_default_cluster_without_another_account(
    login, researcher, cluster, second
):
    page = login(researcher).get("/jobs/new").content.decode()
    assert cluster_options(page) == [cluster.name]


def test_the_form_offers_each_cluster_where_the_researcher_has_an_account(
    login, researcher, cluster, second
):
    ClusterAccount.objects.create(user=researcher, cluster=second, unix_user="alice2")
    page = login(researcher).get("/jobs/new").content.decode()
    assert cluster_options(page) == [cluster.name, "second"]


def test_a_job_for_a_cluster_without_an_account_is_refused_naming_the_field(
    login, researcher, second, job_form, submissions
):
    client = login(researcher)
    answer = client.post(
        "/api/v1/jobs/", {**job_form, "cluster": "second"}, content_type="application/json"
    )
    assert answer.status_code == 400
    assert answer.json()["errors"]["cluster"] == [
        "You have no Unix account on cluster second, so Medbay cannot submit there; "
        "an admin maps one for you."
    ]
    page = client.post("/jobs/new", {**job_form, "cluster": "second"})
    assert page.status_code in (200, 400)
    assert "You have no Unix account on cluster second" in page.content.decode()
    assert submissions == [] and not Job.objects.exists()


def test_a_job_for_a_mapped_cluster_runs_there_as_that_clusters_account(
    login, researcher, second, job_form, submissions
):
    ClusterAccount.objects.create(user=researcher, cluster=second, unix_user="alice2")
    answer = login(researcher).post(
        "/api/v1/jobs/", {**job_form, "cluster": "second"}, content_type="application/json"
    )
    assert answer.status_code == 201, answer.json()
    job = Job.objects.get()
    assert (job.cluster, job.user) == (second, "alice2")
    assert submissions == []  # nothing reached the default cluster
    assert second.sim.job(job.slurm_id).user == "alice2"


def test_leaving_out_the_cluster_submits_to_the_default_one_as_before(
    login, researcher, cluster, second, job_form, submissions
):
    ClusterAccount.objects.create(user=researcher, cluster=second, unix_user="alice2")
    answer = login(researcher).post("/api/v1/jobs/", job_form, content_type="application/json")
    assert answer.status_code == 201, answer.json()
    assert Job.objects.get().cluster == cluster
    assert [submission.user for submission in submissions] == ["alice"]
