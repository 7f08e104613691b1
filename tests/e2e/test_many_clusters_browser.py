"""Two clusters in one portal, in Chromium (issue 32): the header's switcher, the
all-clusters overview and a job page on the second cluster, for each role, with no
console error or failed request."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import (
    WATCH_SOCKET,
    expect,
    launch_portal,
    log_in,
    require_browser,
    wait_for_socket,
    watch_for_problems,
)
from tests.e2e.portal_server import NODE_PREFIX

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def two_clusters(tmp_path_factory, request):
    """A portal of its own: a second cluster changes every page's header and board, which
    the shared portal's other tests must not see."""
    require_browser()
    folder = tmp_path_factory.mktemp("e2e-two-clusters")
    for portal in launch_portal(
        request, folder, "tests/e2e/portal_server.py", MEDBAY_BACKEND="simulated"
    ):
        second = portal.command("second_cluster", name="e2e-b")
        yield portal, second


@pytest.mark.parametrize("username", ["alice", "admin", "manager"])
def test_each_role_switches_cluster_reads_the_overview_and_opens_a_job_there(
    page, two_clusters, username
):
    portal, second = two_clusters
    problems = watch_for_problems(page)
    log_in(page, portal, username)

    switcher = page.locator("#cluster-switcher")
    switcher.locator("summary").click()
    switcher.get_by_role("button", name="e2e-b").click()
    expect(page.locator("#cluster-switcher summary")).to_have_text("e2e-b")
    tiles = page.locator("#board-body .tile")
    expect(tiles.first).to_be_visible()
    for tile in tiles.all():
        expect(tile).to_have_attribute("data-cluster", "e2e-b")

    page.goto(f"{portal.url}/clusters/overview/")
    expect(page.locator("#cluster-e2e-b")).to_be_visible()
    expect(page.locator("#cluster-e2e")).to_be_visible()
    expect(page.locator("#cluster-e2e-b .cluster-nodes")).not_to_have_text("0")

    page.goto(f"{portal.url}/jobs/")
    link = page.locator(f'a[href="/jobs/e2e-b/{second["job"]}/"]')
    expect(link).to_be_visible()
    link.click()
    expect(page).to_have_url(f"{portal.url}/jobs/e2e-b/{second['job']}/")
    expect(page.locator("#job-cluster")).to_contain_text("e2e-b")
    expect(page.locator("#live-status")).to_have_text("live")

    # Back to all clusters for the next role's test, through the switcher again.
    page.locator("#cluster-switcher summary").click()
    page.locator("#cluster-switcher").get_by_role("button", name="All clusters").click()
    expect(page.locator("#cluster-switcher summary")).to_have_text("All clusters")
    problems.assert_none()


def test_an_old_job_address_leads_to_its_cluster_address(page, two_clusters):
    portal, second = two_clusters
    problems = watch_for_problems(page)
    log_in(page, portal, "alice")
    target = f"{portal.url}/jobs/e2e-b/{second['job']}/"
    page.goto(f"{portal.url}/jobs/{second['job']}/")
    if page.url != target:  # the first cluster has a job of alice's with that id too
        page.locator(f'#cluster-choices a[href="/jobs/e2e-b/{second["job"]}/"]').click()
    expect(page).to_have_url(target)
    problems.assert_none()


def test_on_a_phone_the_switcher_fits_the_bar_beside_the_name_and_the_menu(page, two_clusters):
    portal, _ = two_clusters
    page.set_viewport_size({"width": 390, "height": 844})
    problems = watch_for_problems(page)
    log_in(page, portal, "admin")
    summary = page.locator("#cluster-switcher summary")
    summary.click()
    expect(page.locator("#cluster-switcher form")).to_be_visible()

    def box(selector: str) -> dict:
        return page.locator(selector).first.bounding_box()

    switcher, brand, menu = box("#cluster-switcher summary"), box(".brand"), box(".menu summary")
    assert brand["x"] + brand["width"] <= switcher["x"]
    assert switcher["x"] + switcher["width"] <= menu["x"]
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    options = box("#cluster-switcher form")
    assert options["x"] >= 0 and options["x"] + options["width"] <= 390
    problems.assert_none()


def test_the_overview_changes_a_clusters_card_live_when_its_nodes_change(page, two_clusters):
    portal, _ = two_clusters
    node = f"{NODE_PREFIX}-04"
    problems = watch_for_problems(page)
    page.add_init_script(WATCH_SOCKET)
    log_in(page, portal, "manager")
    page.goto(f"{portal.url}/clusters/overview/")
    wait_for_socket(page)
    card = page.locator("#cluster-e2e .cluster-nodes")
    expect(card.locator(".badge-drained")).to_have_count(0)
    other = page.locator("#cluster-e2e-b .cluster-nodes").inner_text()

    portal.command("drain", node=node, reason="e2e: overview")
    expect(card.locator(".badge-drained")).to_have_text("1 drained", timeout=3000)
    portal.command("resume", node=node)
    expect(card.locator(".badge-drained")).to_have_count(0, timeout=3000)
    expect(page.locator("#cluster-e2e-b .cluster-nodes")).to_have_text(other)
    assert page.evaluate("window.__medbayNoReload === true"), "the page was reloaded"
    problems.assert_none()
