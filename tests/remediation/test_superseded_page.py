"""A run's page says which run superseded it, with a link to that run."""

from __future__ import annotations

import pytest

from remediation.models import Remediation
from remediation.transitions import RunStatus
from tests.remediation.conftest import ingest_xid, job_running_on

pytestmark = pytest.mark.django_db


def test_a_superseded_runs_page_links_the_run_that_superseded_it(
    admin_user, web, synced, django_capture_on_commit_callbacks
):
    job_running_on("gpu-02")
    with django_capture_on_commit_callbacks(execute=True):
        ingest_xid("gpu-02", 31, gpu=1)
    milder = Remediation.objects.get()
    with django_capture_on_commit_callbacks(execute=True):
        ingest_xid("gpu-02", 48, gpu=4)

    milder.refresh_from_db()
    drastic = Remediation.objects.exclude(pk=milder.pk).get()
    assert milder.status == RunStatus.CANCELLED
    assert milder.superseded_by_id == drastic.pk
    page = web(admin_user).get(f"/remediation/{milder.pk}/").content.decode()
    assert "Superseded by" in page
    assert f'<a href="/remediation/{drastic.pk}/">run {drastic.pk}</a>' in page
    # The run that took over says nothing of the kind.
    page = web(admin_user).get(f"/remediation/{drastic.pk}/").content.decode()
    assert "Superseded by" not in page
