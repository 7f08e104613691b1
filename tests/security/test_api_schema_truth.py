# ruff: noqa: F811  (the jobs suite's job_form fixture, imported below, is an argument here)
"""What the OpenAPI schema promises, the API does; each of these disagreed once.

`submitted_by` was null where the schema said a string, `auto_resume` was
documented as optional but required, the decisions' comment limits were 150 and
400 where the schema said 500, `notify` was offered in the action enum but
refused, and a decision documented its request body as its response.
"""

from __future__ import annotations

import pytest
from django.test import Client
from drf_spectacular.generators import SchemaGenerator

from tests.jobs.conftest import job_form  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db

SCHEMA = SchemaGenerator().get_schema(request=None, public=True)
DECISION_LIMITS = {"approve": 500, "reject": 500, "cancel": 400, "retry": 400, "release": 150}


def _component(ref: dict) -> dict:
    return SCHEMA["components"]["schemas"][ref["$ref"].rsplit("/", 1)[1]]


def _operation(path: str, method: str) -> dict:
    return SCHEMA["paths"][path][method]


def _request_schema(path: str, method: str = "post") -> dict:
    content = _operation(path, method)["requestBody"]["content"]["application/json"]
    return _component(content["schema"])


@pytest.fixture
def admin(world) -> Client:
    client = Client()
    client.force_login(world.users["admin"])
    return client


def test_submitted_by_is_documented_as_null_for_a_job_medbay_did_not_submit(admin, world):
    from jobs.models import Job

    Job.objects.filter(pk=world.job.pk).update(submitted_by=None)

    job = admin.get(f"/api/v1/jobs/{world.job.slurm_id}/").json()

    assert job["submitted_by"] is None
    assert SCHEMA["components"]["schemas"]["Job"]["properties"]["submitted_by"]["nullable"]


def test_a_job_without_auto_resume_is_accepted_as_the_schema_says(world, admin, job_form):
    form = {**job_form}
    form.pop("auto_resume")

    response = admin.post("/api/v1/jobs/", form, content_type="application/json")

    assert "auto_resume" not in _request_schema("/api/v1/jobs/").get("required", [])
    assert response.status_code == 201, response.json()


def test_the_action_enum_offers_only_what_an_admin_may_request(admin, world):
    from remediation.actions import ADMIN_ACTIONS

    offered = _component(_request_schema("/api/v1/remediations/")["properties"]["action"])["enum"]
    body = {"node": world.node.name, "action": "notify", "reason": "asking for a rung"}

    response = admin.post("/api/v1/remediations/", body, content_type="application/json")

    assert sorted(offered) == sorted(str(action) for action in ADMIN_ACTIONS)
    assert "notify" not in offered
    assert response.status_code == 400
    assert "action" in response.json()["errors"]


@pytest.mark.parametrize("decision", sorted(DECISION_LIMITS))
def test_each_decision_documents_the_comment_limit_it_enforces(admin, world, decision):
    path = f"/api/v1/remediations/{{id}}/{decision}/"
    limit = DECISION_LIMITS[decision]
    url = f"/api/v1/remediations/{world.remediation.pk}/{decision}/"

    too_long = admin.post(url, {"comment": "x" * (limit + 1)}, content_type="application/json")
    at_limit = admin.post(url, {"comment": "x" * limit}, content_type="application/json")

    assert _request_schema(path)["properties"]["comment"]["maxLength"] == limit
    assert too_long.status_code == 400
    assert "comment" in too_long.json()["errors"]
    assert "comment" not in at_limit.json().get("errors", {}), at_limit.json()


@pytest.mark.parametrize("decision", sorted(DECISION_LIMITS))
def test_a_decision_documents_the_run_it_answers_not_its_request_body(decision):
    responses = _operation(f"/api/v1/remediations/{{id}}/{decision}/", "post")["responses"]

    answered = responses["200"]["content"]["application/json"]["schema"]

    assert answered == {"$ref": "#/components/schemas/RemediationDetail"}
    assert responses["409"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Error"
    }


def test_every_operation_documents_its_refusals_in_the_error_shape():
    error = {"$ref": "#/components/schemas/Error"}
    undocumented = []
    for path, item in SCHEMA["paths"].items():
        for method, operation in item.items():
            expected = {"400"} | ({"404"} if "{" in path else set())
            if operation.get("security") != [{}]:  # a job's own token: its 401/403 are its own
                expected |= {"401", "403"}
            for code in expected:
                answer = operation["responses"].get(code, {})
                if answer.get("content", {}).get("application/json", {}).get("schema") != error:
                    undocumented.append(f"{method.upper()} {path} {code}")

    assert undocumented == []
