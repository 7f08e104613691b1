"""Schemathesis fuzzes every operation in /api/v1/schema/ with the credentials it takes.

Whatever it sends, the API never answers with a 500, and what it answers is
documented: the status code, the body's shape and the content type. Seen before:
`submitted_by` null where the schema said a string, a 401/403/404/409 on 40
operation-status pairs the schema did not list, a decision's body documented as
its response. Each operation is also called once as every role and with a
revoked token, so the refusals are checked too. The operations are read from the
schema when the tests are collected, so a new endpoint is fuzzed as soon as it is
routed. A few examples per operation keep the whole run well under a minute.
"""

from __future__ import annotations

import os
import re

import pytest
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, Phase, given, settings

from tests.security.routes import PARAMS

try:
    import schemathesis
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    CHECKS = [
        not_a_server_error,
        status_code_conformance,
        response_schema_conformance,
        content_type_conformance,
    ]
except ImportError:  # the fuzz test says so: skipped here, failed under CI
    schemathesis = None

METHODS = ("get", "post", "put", "patch", "delete")
PATH_PARAM = re.compile(r"{(\w+)}")

SCHEMA = SchemaGenerator().get_schema(request=None, public=True)
OPERATIONS = [
    (path, method.upper())
    for path, item in sorted(SCHEMA["paths"].items())
    for method in METHODS
    if method in item
]


def real_path_parameters(path: str, world) -> dict[str, object]:
    """Path parameters naming real objects, so the fuzzer also sees found responses."""
    values = {}
    for name in PATH_PARAM.findall(path):
        if name == "id" and "/remediations/" in path:
            values[name] = world.remediation.pk
        elif name == "name" and "/reports/" in path:
            values[name] = "utilization"
        elif name in PARAMS:
            values[name] = PARAMS[name](world)
        else:
            pytest.fail(f"{path}: add a real value for {{{name}}} to real_path_parameters()")
    return values


@pytest.fixture
def wsgi_app():
    """The WSGI app, called in this thread on the test's database connection.

    Like Django's test client, keep the request signals from closing that
    connection: inside the test's transaction it counts as obsolete, and on
    PostgreSQL closing it would lose the test's data.
    """
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    from portal.wsgi import application

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield application
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def admin_token(world):
    from identity.accounts import issue_api_token

    return issue_api_token(world.users["admin"], "fuzz")[1]


@pytest.fixture
def credentials(world, admin_token):
    """The header each operation takes: a node's token, a job's, or an admin's API token."""
    from health.models import NodeToken
    from jobs.models import JobToken

    node_token = NodeToken.issue(world.node)[1]
    job_token = JobToken.new_raw()
    JobToken.store(world.job, job_token)

    def header(path: str, method: str) -> dict[str, str]:
        if (path, method) == ("/api/v1/health/events/", "POST"):
            return {"Authorization": f"Bearer {node_token}"}
        if path.endswith("/progress/"):
            return {"Authorization": f"Bearer {job_token}"}
        return {"Authorization": f"Token {admin_token}"}

    return header


@pytest.fixture
def imported_job(world):
    """A job Slurm told us about: nobody submitted it through Medbay (nulls in the API)."""
    from django.utils import timezone

    from jobs.models import Job

    return Job.objects.create(
        cluster=world.job.cluster,
        slurm_id=424243,
        name="from-squeue",
        user="alice",
        partition="train",
        state="PENDING",
        submit_at=timezone.now(),
    )


def _needs_schemathesis():
    if schemathesis is None:
        message = "the API fuzz test needs schemathesis (.venv/bin/pip install schemathesis)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def test_the_schema_the_fuzzer_reads_is_the_one_the_api_serves(world, client):
    served = client.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")

    assert served.status_code == 200
    assert sorted(served.json()["paths"]) == sorted(SCHEMA["paths"])


@pytest.mark.parametrize("path,method", OPERATIONS, ids=[f"{m} {p}" for p, m in OPERATIONS])
def test_no_api_operation_answers_a_500_or_anything_its_schema_does_not_document(
    path, method, world, credentials, imported_job, wsgi_app
):
    _needs_schemathesis()
    api = schemathesis.openapi.from_dict(SCHEMA)
    api.app = wsgi_app
    headers = credentials(path, method)
    operation = api[path][method]
    if PATH_PARAM.search(path):
        real = operation.Case(path_parameters=real_path_parameters(path, world))
        real.call_and_validate(headers=headers, checks=CHECKS)

    @given(case=operation.as_strategy())
    @settings(
        max_examples=8,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def fuzz(case):
        case.call_and_validate(headers=headers, checks=CHECKS)

    fuzz()


CALLERS = ("anonymous", "revoked token", "researcher", "other_researcher", "manager")


@pytest.mark.parametrize("path,method", OPERATIONS, ids=[f"{m} {p}" for p, m in OPERATIONS])
def test_every_caller_is_refused_or_answered_only_as_the_schema_documents(
    path, method, world, imported_job, wsgi_app
):
    from identity.accounts import issue_api_token, revoke_api_token

    _needs_schemathesis()
    api = schemathesis.openapi.from_dict(SCHEMA)
    api.app = wsgi_app
    operation = api[path][method]
    revoked, raw = issue_api_token(world.users["researcher"], "revoked")
    revoke_api_token(world.users["researcher"], revoked.pk)
    for caller in CALLERS:
        if caller == "anonymous":
            headers = {}
        elif caller == "revoked token":
            headers = {"Authorization": f"Token {raw}"}
        else:
            headers = {"Authorization": f"Token {issue_api_token(world.users[caller], 'x')[1]}"}
        case = operation.Case(path_parameters=real_path_parameters(path, world) or None)
        case.call_and_validate(headers=headers, checks=CHECKS)
