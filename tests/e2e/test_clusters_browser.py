"""The Clusters page in Chromium: an admin adds a cluster, is told what is wrong
beside the field, and sees the cluster listed with its file paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import expect, log_in, watch_for_problems

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def test_an_admin_adds_a_cluster_and_sees_it_listed(page, portal):
    problems = watch_for_problems(page)
    log_in(page, portal, "admin")
    page.get_by_role("link", name="Clusters").click()
    expect(page.locator("h1")).to_have_text("Clusters")
    page.get_by_role("link", name="Add a cluster").click()

    # A simulated cluster: the browser tests never reach a real Slurm.
    page.get_by_label("Name").fill("e2e-second")
    page.get_by_label("Transport").select_option("simulated")
    page.get_by_label("Fleet").select_option("simulated")
    page.get_by_label("Sync interval (seconds)").fill("0.1")
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".errorlist")).to_contain_text("between 0.5 and 3600 seconds")

    page.get_by_label("Sync interval (seconds)").fill("5")
    page.get_by_role("button", name="Save").click()
    row = page.locator("#clusters tr", has_text="e2e-second")
    expect(row).to_contain_text("5 s")
    expect(row).to_contain_text("simulator")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "clusters-list.png"), full_page=True)

    row.get_by_role("link", name="e2e-second").click()
    expect(page.locator("#cluster-history")).to_contain_text("sync_interval_s")
    page.screenshot(path=str(ARTIFACTS / "cluster-edit.png"), full_page=True)
    # The refused save answered 400 on purpose (Chromium logs it); nothing else may fail.
    problems.errors = [
        error
        for error in problems.errors
        if error
        not in (
            f"400 {portal.url}/clusters/new/",
            "console: Failed to load resource: the server responded with a status of 400 "
            "(Bad Request)",
        )
    ]
    problems.assert_none()


def test_a_researcher_has_no_clusters_link(page, portal):
    log_in(page, portal, "alice")
    expect(page.get_by_role("link", name="Clusters", exact=True)).to_have_count(0)
