"""Every live page in Chromium: a row appears, changes and leaves without a reload.

Each test opens a page, causes an insert, a change and (where the page can lose
a row) a removal through the product's own interfaces, and asserts what the
person sees within 2 s, failing on any console error or failed request. Faults
are harmless XIDs (the catalogue only notifies), so that no test starts a
remediation or trips the breaker for the next. The last one drops every socket,
as a restarting server does, changes something while the page is away, and
checks that the page catches up.
"""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import WATCH_SOCKET, expect, log_in, wait_for_socket, watch_for_problems

pytestmark = pytest.mark.browser
LIVE_MS = 2000


@pytest.fixture
def watched(page):
    """The page, with problems recorded and the socket watched from the first load."""
    problems = watch_for_problems(page)
    page.add_init_script(WATCH_SOCKET)
    yield page
    assert page.evaluate("window.__medbayNoReload === true"), "the page was reloaded"
    problems.assert_none()


def open_live(page, portal, user: str, path: str) -> None:
    log_in(page, portal, user)
    page.goto(f"{portal.url}{path}")
    wait_for_socket(page)
    expect(page.locator("#live-status")).to_have_text("live")


def test_the_event_feed_shows_a_new_event_on_top_and_its_count_growing(watched, portal):
    node = portal.command("fresh_training")["spare"]
    open_live(watched, portal, "alice", "/health/events/")

    portal.command("xid", node=node, gpu=2, xid=92, message="High single-bit ECC error rate.")

    top = watched.locator("#event-rows tr").first
    expect(top).to_contain_text(node, timeout=LIVE_MS)
    expect(top).to_contain_text("XID 92")
    expect(top.locator("td").nth(5)).to_have_text("1")
    portal.command("xid", node=node, gpu=2, xid=92, message="High single-bit ECC error rate.")
    expect(top.locator("td").nth(5)).to_have_text("2", timeout=LIVE_MS)


def test_a_filtered_feed_shows_only_matching_events(watched, portal):
    node = portal.command("fresh_training")["spare"]
    other = portal.command("fresh_training")["spare"]
    open_live(watched, portal, "alice", f"/health/events/?node={node}")

    portal.command("xid", node=other, gpu=1, xid=43, message="GPU stopped processing.")
    portal.command("xid", node=node, gpu=1, xid=45, message="Preemptive cleanup.")

    rows = watched.locator("#event-rows tr")
    expect(rows.first).to_contain_text("XID 45", timeout=LIVE_MS)
    expect(watched.locator("#event-rows")).not_to_contain_text(other)


def test_the_queue_inserts_changes_and_drops_rows_as_jobs_move(watched, portal):
    portal.command("fresh_training")
    open_live(watched, portal, "admin", "/jobs/?state=PENDING")

    job = portal.command("run_job", user="bob", name="e2e-live-queue", nodes=1, gpus=8)
    expect(watched.locator(f"#job-{job['job']}")).to_have_count(0)  # running, not pending
    waiting = portal.command("run_job", user="bob", name="e2e-waits", nodes=4, gpus=8)
    assert waiting["state"] == "PENDING", waiting
    row = watched.locator(f"#job-{waiting['job']}")
    expect(row).to_contain_text("e2e-waits", timeout=LIVE_MS)  # insert
    expect(watched.locator("#job-rows tr").first).to_have_attribute("id", f"job-{waiting['job']}")

    portal.command("fresh_training")  # cancels everything: the pending job leaves the view
    expect(row).to_have_count(0, timeout=LIVE_MS)


def test_the_queue_shows_a_new_job_and_its_state_change(watched, portal):
    portal.command("fresh_training")
    open_live(watched, portal, "admin", "/jobs/")

    portal.command("run_job", user="bob", name="e2e-takes-a-node", nodes=1, gpus=8)
    waiting = portal.command("run_job", user="bob", name="e2e-grows", nodes=4, gpus=8)
    assert waiting["state"] == "PENDING", waiting
    row = watched.locator(f"#job-{waiting['job']}")
    expect(row.locator(".jobstate")).to_have_text("PENDING", timeout=LIVE_MS)
    portal.command("fresh_training")
    expect(row.locator(".jobstate")).to_have_text("CANCELLED", timeout=LIVE_MS)  # change


def test_the_approval_queue_gains_a_run_and_loses_it_once_decided(watched, portal):
    node = portal.command("fresh_training")["spare"]
    open_live(watched, portal, "admin", "/remediation/approvals/")

    run = portal.command("await_approval", node=node, action="reboot")["run"]
    card = watched.locator(f"#approval-{run}")
    expect(card).to_contain_text(node, timeout=LIVE_MS)
    expect(card.get_by_role("button", name="Approve")).to_be_visible()

    portal.command("decide", run=run, verdict="reject", comment="e2e: not now")
    expect(card).to_have_count(0, timeout=LIVE_MS)


def test_the_run_page_drops_its_decision_forms_and_grows_its_history(watched, portal):
    node = portal.command("fresh_training")["spare"]
    run = portal.command("await_approval", node=node, action="reboot")["run"]
    open_live(watched, portal, "admin", f"/remediation/{run}/")
    expect(watched.get_by_role("button", name="Approve")).to_be_visible()
    history = watched.locator("h2:has-text('Status history') + table tbody tr")
    before = history.count()

    portal.command("decide", run=run, verdict="reject", comment="e2e: not now")

    expect(watched.locator(f"#run-{run}-status")).to_contain_text("Rejected", timeout=LIVE_MS)
    expect(watched.get_by_role("button", name="Approve")).to_have_count(0)
    expect(watched.get_by_role("button", name="Reject")).to_have_count(0)
    expect(history).to_have_count(before + 1)


def test_the_run_list_shows_a_new_run_and_its_new_status(watched, portal):
    node = portal.command("fresh_training")["spare"]
    open_live(watched, portal, "admin", "/remediation/")

    run = portal.command("await_approval", node=node, action="reboot")["run"]
    row = watched.locator(f"#run-{run}-row")
    expect(row).to_contain_text("Awaiting Approval", timeout=LIVE_MS)
    portal.command("decide", run=run, verdict="reject", comment="e2e: not now")
    expect(row).to_contain_text("Rejected", timeout=LIVE_MS)


def test_the_node_page_follows_the_nodes_state(watched, portal):
    node = portal.command("fresh_training")["spare"]
    open_live(watched, portal, "admin", f"/nodes/{node}/")
    badge = watched.locator("h1 .badge")
    expect(badge).to_have_text("spare")

    portal.command("drain", node=node, reason="e2e: maint PSU swap")

    expect(badge).to_have_text("drained", timeout=LIVE_MS)
    expect(watched.locator("#node-page")).to_contain_text("e2e: maint PSU swap")


def test_the_xid_page_shows_a_new_occurrence(watched, portal):
    node = portal.command("fresh_training")["spare"]
    open_live(watched, portal, "alice", "/health/xid/92/")

    portal.command("xid", node=node, gpu=4, xid=92, message="High single-bit ECC error rate.")

    expect(watched.locator("#xid-events tr").first).to_contain_text(node, timeout=LIVE_MS)


# The browser waits this long before it reconnects, so that a change lands while it is away.
SLOW_RECONNECT = """
window.__medbayCloses = 0; window.__medbayOpens = 0;
document.addEventListener("DOMContentLoaded", () => {
  htmx.config.wsReconnectDelay = () => 1500;
});
document.addEventListener("htmx:wsClose", () => { window.__medbayCloses += 1; });
document.addEventListener("htmx:wsOpen", () => { window.__medbayOpens += 1; });
"""


def test_a_page_whose_socket_dropped_catches_up_on_what_it_missed(watched, portal):
    node = portal.command("fresh_training")["spare"]
    watched.add_init_script(SLOW_RECONNECT)
    open_live(watched, portal, "alice", "/health/events/")

    portal.command("drop_sockets")
    watched.wait_for_function("() => window.__medbayCloses >= 1")
    expect(watched.locator("#live-status")).to_have_text("reconnecting")
    # While the page is away: nothing can reach it over the socket.
    portal.command("xid", node=node, gpu=5, xid=63, message="Row remapping event.")
    assert watched.evaluate("window.__medbayOpens") == 1, "reconnected too soon for the test"

    watched.wait_for_function("() => window.__medbayOpens >= 2", timeout=10_000)
    expect(watched.locator("#live-status")).to_have_text("live")
    expect(watched.locator("#event-rows tr").first).to_contain_text(node, timeout=LIVE_MS)
    assert re.search("XID 63", watched.locator("#event-rows tr").first.text_content())
