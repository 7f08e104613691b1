"""Grouped faults in a real browser: a job's crash on every node is one feed row with
each node's events inside, and a leaf switch's failure has a page of its own where an
admin decides on the part; both pages fit a phone."""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import (
    ARTIFACTS,
    expect,
    launch_portal,
    log_in,
    require_browser,
    watch_for_problems,
)
from tests.e2e.portal_server import NODE_PREFIX

pytestmark = pytest.mark.browser

LEAF = [f"{NODE_PREFIX}-0{n}" for n in range(1, 5)]
GROUPED_S = 30


@pytest.fixture(scope="module")
def grouping_portal(tmp_path_factory, request):
    """A portal whose training nodes share one leaf switch (Slurm's topology.conf)."""
    require_browser()
    folder = tmp_path_factory.mktemp("e2e-groups")
    topology = folder / "topology.conf"
    topology.write_text(f"SwitchName=leaf1 Nodes={NODE_PREFIX}-[01-04]\n")
    yield from launch_portal(
        request,
        folder,
        "tests/e2e/portal_server.py",
        MEDBAY_BACKEND="simulated",
        MEDBAY_TOPOLOGY_FILES=str(topology),
        MEDBAY_JOB_FAULT_WINDOW_S="3",
        MEDBAY_PART_FAULT_WINDOW_S="3",
    )


def no_sideways_scroll(page) -> None:
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"page is {width}px wide"


def shoot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_a_jobs_crash_on_every_node_is_one_feed_row_with_its_events_inside(page, grouping_portal):
    portal = grouping_portal
    job = portal.command("run_job", user="alice", name="crashes", nodes=2)
    assert job["state"] == "RUNNING", job
    problems = watch_for_problems(page)
    log_in(page, portal, "alice")
    page.goto(f"{portal.url}/health/events/")
    for node in job["nodes"]:
        for gpu in (0, 1):
            portal.command("xid", node=node, gpu=gpu, xid=13, message="Graphics Exception")

    row = page.locator("tr.fault-group")
    expect(row).to_have_count(1, timeout=GROUPED_S * 1000)
    expect(row).to_contain_text(f"Fault of job {job['job']}")
    expect(row).to_contain_text("XID 13 on 4 GPUs of 2 nodes")
    expect(page.locator("tr[id^=event-]")).to_have_count(0)  # none outside the row
    row.locator("summary").click()
    expect(row.locator("ul.group-events li")).to_have_count(4)

    row.get_by_role("link", name=re.compile("Fault of job")).click()
    expect(page.locator("#group-summary")).to_contain_text(
        "an error in the application, not in the hardware"
    )
    expect(page.locator("body")).to_contain_text("no node was taken out of service")
    shoot(page, "fault-group-job-1440")
    page.set_viewport_size({"width": 390, "height": 844})
    no_sideways_scroll(page)
    shoot(page, "fault-group-job-390")
    problems.assert_none()


def test_a_leaf_switchs_failure_has_a_page_where_an_admin_decides_on_the_part(
    page, grouping_portal
):
    portal = grouping_portal
    problems = watch_for_problems(page)
    log_in(page, portal, "admin")
    page.goto(f"{portal.url}/health/events/")
    for node in LEAF[:3]:
        portal.command("xid", node=node, gpu=6, xid=79)

    row = page.locator("tr.fault-group", has_text="Suspected switch leaf1")
    expect(row).to_have_count(1, timeout=GROUPED_S * 1000)
    row.get_by_role("link", name="Suspected switch leaf1").click()
    expect(page.locator("h1")).to_have_text("Suspected switch leaf1")
    expect(page.locator("#group-summary")).to_contain_text("under switch leaf1")
    runs = page.locator("table").first.locator("tbody tr")
    expect(runs).to_have_count(3, timeout=GROUPED_S * 1000)
    expect(runs.first).to_contain_text("Drain")
    expect(page.get_by_role("button", name="Replace the nodes")).to_be_visible()
    shoot(page, "fault-group-part-1440")
    page.set_viewport_size({"width": 390, "height": 844})
    no_sideways_scroll(page)
    shoot(page, "fault-group-part-390")
    problems.assert_none()
