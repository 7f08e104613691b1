"""The queue page: the whole cluster's queue, PrivateData, sorting, pages and filters."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from clusters.privacy import forget_private_data
from jobs.models import Job

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def fresh_private_data(sim, cluster):
    """PrivateData is cached by cluster id, and ids repeat from test to test."""
    forget_private_data(cluster.pk)
    yield
    cache.clear()


@pytest.fixture
def private_jobs(sim, cluster):
    sim.private_data_kinds = frozenset({"jobs", "usage"})
    forget_private_data(cluster.pk)


def make_job(cluster, slurm_id, **fields):
    fields.setdefault("user", "alice")
    return Job.objects.create(cluster=cluster, slurm_id=slurm_id, **fields)


def row_ids(response) -> list[int]:
    return [int(found) for found in re.findall(r'<tr id="job-(\d+)"', response.content.decode())]


def row(response, slurm_id: int) -> str:
    page = response.content.decode()
    return re.search(rf'<tr id="job-{slurm_id}".*?</tr>', page, re.S).group(0)


def test_a_researcher_sees_other_users_jobs_in_the_queue(login, researcher, cluster):
    make_job(cluster, 1, user="alice", name="mine")
    make_job(cluster, 2, user="bob", name="bobs-run", account="physics")

    response = login(researcher).get("/jobs/")

    assert row_ids(response) == [2, 1]
    assert "bobs-run" in row(response, 2) and "bob" in row(response, 2)


def test_a_queue_row_links_only_to_a_job_its_viewer_may_open(login, researcher, manager, cluster):
    make_job(cluster, 1, user="alice", name="mine")
    make_job(cluster, 2, user="bob", name="bobs-run")
    alice = login(researcher)

    queue = alice.get("/jobs/")

    assert 'href="/jobs/test/1/"' in row(queue, 1)
    assert 'href="/jobs/test/2/"' not in row(queue, 2)  # bob's page answers alice 404
    assert alice.get("/jobs/2/", follow=True).status_code == 404
    staff = login(manager).get("/jobs/")
    assert 'href="/jobs/test/2/"' in row(staff, 2) and 'href="/jobs/test/1/"' in row(staff, 1)


def test_with_private_data_jobs_other_users_details_are_hidden(
    login, researcher, cluster, private_jobs
):
    make_job(cluster, 1, user="alice", name="mine", gpus=8, start_at=T0)
    make_job(
        cluster, 2, user="bob", name="secret-run", account="physics", partition="train",
        state="RUNNING", gpus=16, node_names=["gpu-03"], node_count=2, reason="None",
    )  # fmt: skip

    response = login(researcher).get("/jobs/")
    hidden = row(response, 2)

    assert row_ids(response) == [2, 1]
    assert "secret-run" not in response.content.decode()
    assert "bob" not in hidden and "16" not in hidden and "physics" not in hidden
    assert "hidden" in hidden and "train" in hidden and "RUNNING" in hidden
    assert 'href="/jobs/2/"' not in hidden
    assert "mine" in row(response, 1)


def test_a_researcher_still_cannot_open_a_hidden_job(login, researcher, cluster, private_jobs):
    make_job(cluster, 2, user="bob", name="secret-run")

    assert login(researcher).get("/jobs/2/", follow=True).status_code == 404


def test_admins_and_managers_see_every_detail_despite_private_data(
    login, admin_user, manager, cluster, private_jobs
):
    make_job(cluster, 2, user="bob", name="secret-run")

    for person in (admin_user, manager):
        assert "secret-run" in row(login(person).get("/jobs/"), 2)


def test_hidden_jobs_cannot_be_found_by_name_or_user_nor_ordered_by_name(
    login, researcher, cluster, private_jobs
):
    make_job(cluster, 1, user="alice", name="mmm")
    make_job(cluster, 2, user="bob", name="zzz")
    make_job(cluster, 3, user="bob", name="aaa")
    client = login(researcher)

    assert row_ids(client.get("/jobs/?q=aaa")) == []
    assert row_ids(client.get("/jobs/?user=bob")) == []
    # Hidden rows sort last, by id, whatever their names are.
    assert row_ids(client.get("/jobs/?sort=name&order=asc")) == [1, 2, 3]
    assert row_ids(client.get("/jobs/?sort=name&order=desc")) == [1, 3, 2]


def test_the_queue_sorts_by_each_column_both_ways(login, manager, cluster):
    make_job(cluster, 1, user="carol", name="b", gpus=8, restart_count=2, submit_at=T0)
    make_job(
        cluster, 2, user="alice", name="c", gpus=16, restart_count=0, submit_at=T0 + timedelta(1)
    )
    make_job(cluster, 3, user="bob", name="a", gpus=1, restart_count=1)
    client = login(manager)

    assert row_ids(client.get("/jobs/?sort=id")) == [3, 2, 1]
    assert row_ids(client.get("/jobs/?sort=id&order=asc")) == [1, 2, 3]
    assert row_ids(client.get("/jobs/?sort=name")) == [3, 1, 2]
    assert row_ids(client.get("/jobs/?sort=user&order=desc")) == [1, 3, 2]
    assert row_ids(client.get("/jobs/?sort=gpus")) == [2, 1, 3]
    assert row_ids(client.get("/jobs/?sort=restarts&order=asc")) == [2, 3, 1]
    # A job never submitted-at sorts last either way.
    assert row_ids(client.get("/jobs/?sort=submitted&order=asc")) == [1, 2, 3]
    assert row_ids(client.get("/jobs/?sort=submitted&order=desc")) == [2, 1, 3]


def test_gpu_hours_are_gpus_times_running_time_and_sort(login, manager, cluster):
    make_job(cluster, 1, gpus=8, start_at=T0, end_at=T0 + timedelta(hours=2), state="COMPLETED")
    make_job(cluster, 2, gpus=4, start_at=T0, end_at=T0 + timedelta(minutes=30), state="FAILED")
    make_job(cluster, 3, gpus=16, state="PENDING")
    client = login(manager)

    response = client.get("/jobs/?sort=gpu_hours")

    assert row_ids(response) == [1, 2, 3]
    assert '<td class="gpu-hours">16.0</td>' in row(response, 1)
    assert '<td class="gpu-hours">2.0</td>' in row(response, 2)
    assert '<td class="gpu-hours">—</td>' in row(response, 3)


def test_a_running_jobs_gpu_hours_count_until_now(login, manager, cluster):
    make_job(cluster, 1, gpus=2, start_at=datetime.now(UTC) - timedelta(hours=3), state="RUNNING")

    response = login(manager).get("/jobs/")

    assert '<td class="gpu-hours">6.0</td>' in row(response, 1)


def test_the_queue_pages_fifty_jobs_at_a_time(login, manager, cluster):
    Job.objects.bulk_create(
        Job(cluster=cluster, slurm_id=slurm_id, user="alice") for slurm_id in range(1, 121)
    )
    client = login(manager)

    assert row_ids(client.get("/jobs/?sort=id")) == list(range(120, 70, -1))
    assert row_ids(client.get("/jobs/?sort=id&page=2")) == list(range(70, 20, -1))
    assert row_ids(client.get("/jobs/?sort=id&page=3")) == list(range(20, 0, -1))
    assert "page 3 of 3" in client.get("/jobs/?page=3").content.decode()


def test_the_queue_opens_on_running_and_pending_jobs_then_the_newest_finished(
    login, manager, cluster
):
    """The demo's history has ids from 50,000,000: by id, last month's jobs filled the
    first pages and a job just submitted was on page 11."""
    ended = T0 - timedelta(days=30)
    for slurm_id in range(50_000_000, 50_000_060):  # last month, finished, high ids
        make_job(cluster, slurm_id, state="COMPLETED", submit_at=ended, end_at=ended + timedelta(1))
    make_job(cluster, 1040, state="RUNNING", submit_at=T0, start_at=T0, end_at=T0 + timedelta(1))
    make_job(cluster, 1041, state="PENDING", submit_at=T0 + timedelta(minutes=5))
    make_job(cluster, 1039, state="FAILED", submit_at=T0, end_at=T0 + timedelta(minutes=1))
    client = login(manager)

    first_page = row_ids(client.get("/jobs/"))

    # Pending 1041 was submitted last; running 1040's end time is only its time limit.
    assert first_page[:3] == [1041, 1040, 1039]
    assert len(first_page) == 50
    api = client.get("/api/v1/jobs/").json()
    assert [job["id"] for job in api["results"][:3]] == [1041, 1040, 1039]


def test_under_private_data_hidden_jobs_are_not_ordered_by_their_times(
    login, researcher, cluster, private_jobs
):
    make_job(cluster, 7, user="bob", state="COMPLETED", submit_at=T0, end_at=T0 + timedelta(2))
    make_job(cluster, 5, user="bob", state="COMPLETED", submit_at=T0, end_at=T0 + timedelta(3))
    make_job(cluster, 6, state="COMPLETED", submit_at=T0, end_at=T0 + timedelta(1))

    # alice's own finished job first; bob's hidden ones after it, by id, whatever their end.
    assert row_ids(login(researcher).get("/jobs/")) == [6, 7, 5]


def test_sort_pages_and_filters_keep_each_others_parameters(login, manager, cluster):
    Job.objects.bulk_create(
        Job(cluster=cluster, slurm_id=slurm_id, user="bob", partition="train", state="PENDING")
        for slurm_id in range(1, 121)
    )
    client = login(manager)

    assert row_ids(client.get("/jobs/?state=PENDING&user=bob&sort=id&order=asc&page=2"))[0] == 51

    page = html.unescape(
        client.get("/jobs/?state=PENDING&user=bob&sort=gpus&order=asc").content.decode()
    )
    next_link = re.search(r'href="(/jobs/\?[^"]*)" rel="next"', page).group(1)
    assert all(
        part in next_link
        for part in ("state=PENDING", "user=bob", "sort=gpus", "order=asc", "page=2")
    )
    name_header = re.search(r'href="(/jobs/\?[^"]*)" class="sort-name"', page).group(1)
    assert "state=PENDING" in name_header and "user=bob" in name_header
    assert "sort=name" in name_header and "page=" not in name_header
    gpus_header = re.search(r'href="(/jobs/\?[^"]*)" class="sort-gpus"', page).group(1)
    assert "order=desc" in gpus_header  # clicking the sorted column flips it
    assert '<input type="hidden" name="sort" value="gpus">' in page
    assert '<input type="hidden" name="order" value="asc">' in page
    assert 'name="user" value="bob"' in page


def test_the_name_search_finds_jobs_by_part_of_their_name(login, researcher, cluster):
    make_job(cluster, 1, user="bob", name="llama-70b-pretrain")
    make_job(cluster, 2, user="alice", name="resnet")

    assert row_ids(login(researcher).get("/jobs/?q=70B")) == [1]


@pytest.mark.parametrize(
    "query",
    [
        "sort=password&order=sideways",
        "sort=name;DROP%20TABLE%20jobs_job&order=asc",
        "page=abc",
        "page=-3",
        "page=0",
        "page=1.5",
        "page=99999999999999999999",
        "page=" + "9" * 5000,
        "page=%C2%B2",
        "state=%00",
        "user=%00",
        "partition=ab%00c",
        "q=%00%00",
        "q=" + "x" * 5000,
        "sort=%00&order=%00&page=%00",
        "state=RUNNING&state=PENDING",
    ],
)
def test_hostile_parameters_never_give_a_server_error(login, researcher, cluster, query):
    make_job(cluster, 1, user="alice")

    response = login(researcher).get(f"/jobs/?{query}")

    assert response.status_code in (200, 400)


def test_a_page_past_the_end_shows_the_last_page(login, manager, cluster):
    Job.objects.bulk_create(
        Job(cluster=cluster, slurm_id=slurm_id, user="alice") for slurm_id in range(1, 61)
    )

    response = login(manager).get("/jobs/?page=99999999999999999999")

    assert row_ids(response) == list(range(10, 0, -1))


@pytest.mark.parametrize("person", ["researcher", "admin_user"])
def test_the_queue_runs_the_same_queries_for_one_page_of_jobs_as_for_three(
    request, login, cluster, private_jobs, person
):
    client = login(request.getfixturevalue(person))

    def queries_for_queue() -> int:
        client.get("/jobs/?sort=gpu_hours")  # the PrivateData cache is warm from here on
        with CaptureQueriesContext(connection) as captured:
            response = client.get("/jobs/?sort=gpu_hours&page=2")
        assert response.status_code == 200
        return len(captured)

    Job.objects.bulk_create(
        Job(cluster=cluster, slurm_id=n, user="alice" if n % 2 else "bob", gpus=n % 9)
        for n in range(1, 51)
    )
    one_page = queries_for_queue()
    Job.objects.bulk_create(
        Job(cluster=cluster, slurm_id=n, user="alice" if n % 2 else "bob", gpus=n % 9)
        for n in range(51, 151)
    )

    assert queries_for_queue() == one_page


def test_a_controller_that_cannot_say_its_private_data_hides_other_users_jobs(
    login, researcher, cluster, sim, monkeypatch
):
    from clusters.backends.base import BackendError

    def unreachable():
        raise BackendError(
            "slurm_load_ctl_conf error: Unable to contact slurm controller", permanent=False
        )

    monkeypatch.setattr(sim, "private_data", unreachable)
    make_job(cluster, 2, user="bob", name="secret-run")

    response = login(researcher).get("/jobs/")

    assert "secret-run" not in response.content.decode() and "hidden" in row(response, 2)


def test_the_queue_works_and_asks_slurm_once_while_the_cache_is_down(
    login, researcher, cluster, sim, private_jobs, monkeypatch
):
    import clusters.privacy

    class DownCache:
        def __getattr__(self, name):
            def refuse(*args, **kwargs):
                raise ConnectionError("Error 111 connecting to 127.0.0.1:6379")

            return refuse

    asked = []
    original = sim.private_data
    monkeypatch.setattr(sim, "private_data", lambda: asked.append(1) or original())
    make_job(cluster, 2, user="bob", name="secret-run")
    client = login(researcher)
    monkeypatch.setattr(clusters.privacy, "cache", DownCache())

    pages = [client.get("/jobs/") for _ in range(3)]

    assert all(page.status_code == 200 for page in pages)
    assert "secret-run" not in pages[-1].content.decode()
    assert len(asked) == 1


def test_the_job_page_and_live_rows_keep_the_row_id_state_cell_and_gpu_hours(
    login, researcher, cluster
):
    job = make_job(
        cluster, 5, state="COMPLETED", gpus=8, start_at=T0, end_at=T0 + timedelta(hours=1)
    )

    page = login(researcher).get("/jobs/5/", follow=True).content.decode()
    live = (
        login(researcher)
        .get("/jobs/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="job-rows")
        .content.decode()
    )
    assert job.slurm_id == 5

    for fragment in (page, live):
        assert re.search(r'<tr id="job-5"[^>]*>', fragment)
        assert '<span class="jobstate jobstate-completed">' in fragment
        assert '<td class="gpu-hours">8.0</td>' in fragment
