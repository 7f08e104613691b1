"""Remediation in a real browser: replacing a node with a live timeline, and approvals."""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import WATCH_SOCKET, expect, log_in, wait_for_socket
from tests.e2e.portal_server import NODE_PREFIX

pytestmark = pytest.mark.browser

# Long enough that the run is still going when its page has loaded, so the later
# steps can only arrive over the websocket; short enough to keep the suite quick.
GRACE_S = 2
RUN_FINISHES_S = 30


def test_an_admin_replaces_a_node_and_watches_its_timeline_fill_in_live(page, portal):
    job = portal.command("run_job", user="bob", name="e2e-replace-me")
    assert job["state"] == "RUNNING", job
    node = job["nodes"][0]
    page.add_init_script(WATCH_SOCKET)
    log_in(page, portal, "admin")

    page.goto(f"{portal.url}/nodes/{node}/")
    page.locator(".node-actions").get_by_role("link", name="Replace").click()
    expect(page).to_have_url(f"{portal.url}/nodes/e2e/{node}/actions/replace/")
    impact = page.locator(".impact")
    expect(impact).to_contain_text("1 running job of 1 user (bob) on 8 GPUs")
    expect(impact.locator("tr.affected-job")).to_contain_text("e2e-replace-me")
    # Other tests of this session may have added spares: at least one is free.
    expect(impact).to_contain_text(re.compile(r"Spare capacity: \d+ free spare"))

    page.get_by_label("Reason").fill("e2e: XID 79, GPU fell off the bus")
    page.get_by_label("Checkpoint grace (s)").fill(str(GRACE_S))
    page.get_by_role("button", name="Start replace").click()

    expect(page).to_have_url(re.compile(r"/remediation/\d+/$"))
    run_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
    wait_for_socket(page)
    steps = page.locator(f"#run-{run_id}-steps tr.step")
    rows_at_load = steps.count()
    status = page.locator(f"#run-{run_id}-status")
    expect(status).to_contain_text("Succeeded", timeout=RUN_FINISHES_S * 1000)
    expect(steps.last).to_contain_text("Release jobs")
    expect(steps.last.locator(".badge")).to_have_text("Succeeded")
    assert steps.count() > rows_at_load, "no step arrived live after the page loaded"
    assert page.evaluate("window.__medbayNoReload === true"), "the page was reloaded"
    swap_step = page.locator("td:nth-child(2)", has_text=re.compile(r"^Replace with a spare$"))
    swap = steps.filter(has=swap_step)
    expect(swap).to_contain_text(
        re.compile(rf"{NODE_PREFIX}-\d+ replaces {node}; {node} marked fail")
    )
    replacement = re.search(rf"({NODE_PREFIX}-\d+) replaces", swap.text_content()).group(1)

    portal.command("sync")  # what the slurm_sync loop does next in production
    page.goto(f"{portal.url}/")
    expect(page.locator(f"#node-{node}")).to_have_class(re.compile(r"\bpool-spare\b"))
    expect(page.locator(f"#node-{node}")).to_have_class(re.compile(r"\bstatus-fail"))
    spare = page.locator(f"#node-{replacement}")
    expect(spare).to_have_class(re.compile(r"\bpool-training\b"))


def test_a_researcher_gets_a_forbidden_page_instead_of_the_approval_queue(page, portal):
    log_in(page, portal, "alice")

    response = page.goto(f"{portal.url}/remediation/approvals/")

    assert response.status == 403
    expect(page.locator("section.error h1")).to_contain_text("403")
    expect(page.locator("section.error")).to_contain_text("You do not have permission")
    expect(page.locator("body")).not_to_contain_text("Traceback")
    expect(page.locator(".approval")).to_have_count(0)


def test_an_admin_approves_a_waiting_run_with_a_comment(page, portal):
    node = f"{NODE_PREFIX}-03"
    run_id = portal.command("await_approval", node=node, action="cordon")["run"]
    log_in(page, portal, "admin")

    page.goto(f"{portal.url}/remediation/approvals/")
    card = page.locator(f"#approval-{run_id}")
    expect(card).to_contain_text(f"Cordon {node}")
    expect(card.locator(".impact")).to_contain_text("Steps: Drain → Cordon")
    approve = card.locator("form.decision").filter(has=page.get_by_role("button", name="Approve"))
    approve.get_by_label("Comment").fill("e2e: fine, go ahead")
    approve.get_by_role("button", name="Approve").click()

    expect(page).to_have_url(f"{portal.url}/remediation/approvals/")
    expect(page.locator(f"#approval-{run_id}")).to_have_count(0)
    page.goto(f"{portal.url}/remediation/{run_id}/")
    expect(page.locator(".facts")).to_contain_text("admin at")
    expect(page.locator(".facts")).to_contain_text("“e2e: fine, go ahead”")
    expect(page.locator(f"#run-{run_id}-status")).to_contain_text(re.compile("Running|Succeeded"))
