"""The spare pool's partition is kept for replacements, not offered to researchers."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_the_job_form_does_not_offer_the_spare_partition(login, researcher, synced):
    page = login(researcher).get("/jobs/new").content.decode()

    assert 'value="train"' in page
    assert 'value="spare"' not in page


def test_a_submission_to_the_spare_partition_is_refused(
    login, researcher, job_form, synced, submissions
):
    response = login(researcher).post("/jobs/new", {**job_form, "partition": "spare"})

    assert response.status_code == 400 or "Select a valid choice" in response.content.decode()
    assert submissions == []


def test_an_admin_can_offer_the_spare_partition_with_a_setting(login, researcher, synced, settings):
    settings.MEDBAY_SPARE_FOR_RESEARCHERS = True

    page = login(researcher).get("/jobs/new").content.decode()

    assert 'value="spare"' in page
