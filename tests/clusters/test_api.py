from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from clusters.backends.simulated import SimulatedCluster
from clusters.models import Cluster
from sync.cycle import apply_snapshot
from tests.conftest import PASSWORD


def api_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_anonymous_api_calls_get_a_json_401(db):
    response = APIClient().get("/api/v1/nodes/")
    assert response.status_code == 401
    assert set(response.json()) == {"detail", "errors"}


def test_the_token_endpoint_returns_a_token_that_works(researcher, synced):
    client = APIClient()
    response = client.post(
        "/api/v1/auth/token/", {"username": "alice", "password": PASSWORD}, format="json"
    )
    assert response.status_code == 200
    client.credentials(HTTP_AUTHORIZATION=f"Token {response.json()['token']}")
    assert client.get("/api/v1/nodes/").status_code == 200


def test_a_wrong_password_gets_field_errors_not_a_500(researcher):
    response = APIClient().post("/api/v1/auth/token/", {"username": "alice"}, format="json")
    assert response.status_code == 400
    assert "password" in response.json()["errors"]


def test_nodes_list_shows_state_pool_gpus_and_jobs(researcher, sim, synced):
    from clusters.backends.base import JobSubmission

    job_id = sim.submit_job(
        JobSubmission(script="#SBATCH --partition=train\n#SBATCH --gres=gpu:4\n", user="alice")
    )
    synced(__import__("datetime").timedelta(seconds=1))
    body = api_for(researcher).get("/api/v1/nodes/").json()
    assert body["count"] == 7
    first = body["results"][0]
    assert first["name"] == "gpu-01"
    assert first["pool"] == "training" and first["partitions"] == ["train"]
    assert [g["index"] for g in first["gpus"]] == list(range(8))
    assert first["jobs"] == [job_id]
    assert first["status"] == "mixed"


def test_node_detail_by_name_and_404_json(researcher, synced):
    client = api_for(researcher)
    assert client.get("/api/v1/nodes/gpu-03/").json()["name"] == "gpu-03"
    missing = client.get("/api/v1/nodes/gpu-99/")
    assert missing.status_code == 404
    assert missing.json() == {"detail": "Not found.", "errors": {}}


def test_a_user_without_a_role_gets_403(django_user_model, synced):
    user = django_user_model.objects.create_user("nobody", password=PASSWORD)
    assert api_for(user).get("/api/v1/nodes/").status_code == 403


def nodes_list_queries(user, nodes: int) -> int:
    sim = SimulatedCluster.standard(train=nodes, infer=0, spare=0, seed=1)
    sim.generate_workload()
    sim.advance(__import__("datetime").timedelta(seconds=1))
    cluster = Cluster.objects.create(name=f"c{nodes}")
    apply_snapshot(cluster, sim.partitions(), sim.nodes(), sim.jobs())
    client = api_for(type(user).objects.get(pk=user.pk))  # no cached roles
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/api/v1/nodes/?limit=500").status_code == 200
    return len(queries)


def test_the_nodes_list_does_a_constant_number_of_queries(researcher):
    assert nodes_list_queries(researcher, 3) == nodes_list_queries(researcher, 60)


def test_the_openapi_schema_and_docs_are_served(researcher):
    client = api_for(researcher)
    schema = client.get("/api/v1/schema/")
    assert schema.status_code == 200
    assert b"/api/v1/nodes/" in schema.content
    assert client.get("/api/v1/docs/").status_code == 200
