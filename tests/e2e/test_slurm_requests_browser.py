"""An admin's request typed in Slurm, as the admins see it in Chromium, on the real
local Slurm: the portal's own sync reads `scontrol update ... reason="Action:Replace
..."`, and the approval card (this site asks a second admin for requested replaces)
says who asked in Slurm and what they typed; approving it brings the spare in, and the
node's page lists the request with its run."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.e2e.conftest import (
    WATCH_SOCKET,
    expect,
    launch_slurm_portal,
    log_in,
    require_browser,
    wait_for_socket,
    watch_for_problems,
)

pytestmark = [pytest.mark.browser, pytest.mark.slurm, pytest.mark.slurm_versions]

SECOND_ADMIN = "admin"


@pytest.fixture
def slurm_portal(request, slurm, tmp_path):
    require_browser()
    yield from launch_slurm_portal(
        request,
        tmp_path,
        MEDBAY_SLURM_REASON_ACTIONS="Action:Replace=replace/approval;Action:Reboot=reboot",
    )


def test_the_approval_card_says_who_asked_in_slurm_and_what_they_typed(page, slurm_portal, slurm):
    problems = watch_for_problems(page)
    page.add_init_script(WATCH_SOCKET)
    log_in(page, slurm_portal, SECOND_ADMIN)
    page.goto(f"{slurm_portal.url}/remediation/approvals/")
    wait_for_socket(page)

    subprocess.run(
        ["scontrol", "update", "nodename=gpu-02", "state=fail",
         "reason=Action:Replace fans failing, ticket 4711"],
        env={**os.environ, "SLURM_CONF": slurm.slurm_conf}, check=True, capture_output=True,
    )  # fmt: skip

    card = page.locator("section.approval").filter(has_text="gpu-02")
    expect(card).to_be_visible(timeout=30_000)  # arrives live, within a sync interval
    request = card.locator(".slurm-request")
    expect(request).to_contain_text("Asked in Slurm by root")
    expect(request).to_contain_text("state=fail")
    expect(request.locator("q")).to_have_text("Action:Replace fans failing, ticket 4711")
    expect(card).to_contain_text("running jobs are not killed")
    assert page.evaluate("window.__medbayNoReload === true"), "the page was reloaded"
    page.screenshot(path="test-artifacts/slurm-request-approval.png", full_page=True)

    card.get_by_role("button", name="Approve").click()
    expect(page.locator("section.approval").filter(has_text="gpu-02")).to_have_count(0)
    page.goto(f"{slurm_portal.url}/nodes/gpu-02/")
    row = page.locator(".slurm-requests li").first
    expect(row).to_contain_text("root")
    expect(row.locator("q")).to_have_text("Action:Replace fans failing, ticket 4711")
    expect(row.get_by_role("link", name=re.compile(r"run \d+"))).to_be_visible()
    assert problems.errors == [], problems.errors
