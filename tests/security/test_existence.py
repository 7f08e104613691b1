"""Answers that do not say whether something exists."""

from __future__ import annotations

import re

import pytest

from tests.security.conftest import client_for

pytestmark = pytest.mark.django_db

# Each page masks its CSRF token afresh; nothing else may differ.
CSRF = re.compile(rb'(X-CSRFToken": "|name="csrfmiddlewaretoken" value=")[^"]+')


def _body(response) -> bytes:
    return CSRF.sub(rb"\1...", response.content)


JOB_URLS = (
    "/api/v1/jobs/{id}/",
    "/api/v1/jobs/{id}/timeline/",
    "/jobs/{id}/",
    "/jobs/{id}/story",
    "/jobs/{id}/output/?stream=stdout",
)


@pytest.mark.parametrize("url", JOB_URLS)
def test_a_researcher_gets_the_same_404_for_anothers_job_and_a_missing_one(world, url):
    client = client_for(world, "other_researcher")

    theirs = client.get(url.format(id=world.job.slurm_id))
    missing = client.get(url.format(id=999999))

    assert theirs.status_code == missing.status_code == 404
    assert _body(theirs) == _body(missing)


def test_a_researcher_posting_to_anothers_job_gets_the_same_404_as_for_a_missing_one(world):
    client = client_for(world, "other_researcher")

    for action in ("cancel", "resubmit"):
        theirs = client.post(f"/api/v1/jobs/{world.job.slurm_id}/{action}/")
        missing = client.post(f"/api/v1/jobs/999999/{action}/")
        assert theirs.status_code == missing.status_code == 404
        assert theirs.json() == missing.json()
