import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from clusters.backends.simulated import SimulatedCluster
from sync.cycle import apply_snapshot
from tests.conftest import PASSWORD


def login(client, user):
    assert client.login(username=user.username, password=PASSWORD)


def test_the_board_requires_login(client, db):
    response = client.get(reverse("board"))
    assert response.status_code == 302
    assert response.url.startswith(reverse("login"))


def test_a_user_without_a_role_is_refused(client, django_user_model):
    django_user_model.objects.create_user("nobody", password=PASSWORD)
    client.login(username="nobody", password=PASSWORD)
    assert client.get(reverse("board")).status_code == 403


@pytest.mark.parametrize("role_fixture", ["researcher", "admin_user", "manager"])
def test_every_role_sees_every_node_as_a_tile_with_its_gpus(client, synced, request, role_fixture):
    login(client, request.getfixturevalue(role_fixture))
    html = client.get(reverse("board")).content.decode()
    for number in range(1, 8):
        assert f'id="node-gpu-0{number}"' in html
    assert html.count('class="gpu gpu-healthy"') == 7 * 8
    assert "56</strong> GPUs healthy" in html


def test_the_board_filters_by_pool_and_state(client, researcher, sim, synced):
    sim.drain_node("gpu-01", "medbay: test")
    synced()
    login(client, researcher)
    html = client.get(reverse("board"), {"pool": "spare"}).content.decode()
    assert 'id="node-gpu-06"' in html and 'id="node-gpu-01"' not in html
    html = client.get(reverse("board"), {"state": "drained"}).content.decode()
    assert 'id="node-gpu-01"' in html and 'id="node-gpu-02"' not in html


def test_a_failed_gpu_is_red_and_counted(client, researcher, sim, cluster, synced):
    from demo.simulation import record_gpu_fault

    record_gpu_fault(cluster, sim.inject_xid("gpu-03", 3, 79))
    login(client, researcher)
    html = client.get(reverse("board")).content.decode()
    assert 'class="gpu gpu-failed" title="GPU 3: failed: XID 79' in html
    assert "1</strong> GPU failed" in html


def test_the_node_page_shows_gpus_jobs_and_state_changes(client, researcher, sim, synced):
    sim.drain_node("gpu-02", "medbay: XID 79 GPU 3")
    synced()
    login(client, researcher)
    response = client.get(reverse("node-detail", args=["gpu-02"]), follow=True)
    html = response.content.decode()
    assert response.status_code == 200
    assert "medbay: XID 79 GPU 3" in html
    assert html.count("<td>h100</td>") == 8
    assert "drained" in html


def test_an_unknown_node_is_a_404_page_not_a_traceback(client, researcher, synced):
    login(client, researcher)
    response = client.get(reverse("node-detail", args=["gpu-99"]), follow=True)
    assert response.status_code == 404


def board_queries(client, nodes: int) -> int:
    from clusters.models import Cluster

    sim = SimulatedCluster.standard(train=nodes, infer=0, spare=0, seed=1)
    cluster = Cluster.objects.create(name=f"c{nodes}")
    apply_snapshot(cluster, sim.partitions(), sim.nodes(), sim.jobs())
    with CaptureQueriesContext(connection) as queries:
        assert client.get(reverse("board")).status_code == 200
    return len(queries)


def test_the_board_does_a_constant_number_of_queries(client, researcher):
    login(client, researcher)
    small = board_queries(client, 3)
    assert board_queries(client, 40) == small


def counts_region(client, **filters) -> str:
    """What an open board fetches when its counts are poked, with its own filters."""
    return client.get(
        reverse("board"), filters, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="board-counts"
    ).content.decode()


def test_a_node_out_of_service_with_no_run_is_not_counted_as_in_remediation(
    client, researcher, sim, synced
):
    from clusters.models import Node

    sim.drain_node("gpu-01", "maint PSU swap")
    synced()
    Node.objects.filter(name="gpu-02").update(active_remediation="replace")
    login(client, researcher)

    counts = counts_region(client)

    assert counts.lstrip().startswith('<section id="board-counts"')
    assert "8</strong> GPUs in remediation" in counts  # gpu-02: a run is acting on it
    assert "8</strong> GPUs out of service" in counts  # gpu-01: drained by someone, no run


def test_a_filtered_boards_counts_count_what_it_shows(client, researcher, synced):
    login(client, researcher)

    assert "16</strong> GPUs healthy" in counts_region(client, pool="spare", state="")  # 2 spares
    assert "56</strong> GPUs healthy" in counts_region(client)
