"""Alice watches her job page while a GPU falls off the bus (the simulator's story).

The XID 79 line goes through the agent's parser and the real ingest, the engine
replaces the node, and without a reload her page says why the job restarted,
naming the XID, the GPU, the node and the spare, and the step it resumed from.
"""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import WATCH_SOCKET, expect, log_in, wait_for_socket, watch_for_problems
from tests.waiting import wait_for

pytestmark = pytest.mark.browser


def test_alice_sees_why_her_job_restarted_without_reloading(page, portal):
    portal.command("fresh_training")
    job = portal.command("run_job", user="alice", name="e2e-llm", nodes=2)
    assert job["state"] == "RUNNING", job
    failing = job["nodes"][1]
    portal.command("progress", job=job["job"], step=2479)
    problems = watch_for_problems(page)
    page.add_init_script(WATCH_SOCKET)
    log_in(page, portal, "alice")
    page.goto(f"{portal.url}/jobs/{job['job']}/")
    summary = page.locator("#timeline-summary")
    expect(summary).to_have_text(f"Job {job['job']} has not restarted; it is running.")
    wait_for_socket(page)

    portal.command("xid", node=failing, gpu=3, xid=79)

    def resumed() -> bool:
        portal.command("step", seconds=5)
        return "It resumed at" in (summary.text_content() or "")

    wait_for(resumed, 60, "the page to say the job resumed", interval_s=0.5)
    text = summary.text_content()
    assert f"because GPU 3 on {failing} reported XID 79 (GPU has fallen off the bus)" in text
    assert re.search(rf"replaced {failing} with spare e2e-\d+", text), text
    assert "from the checkpoint at step 2,479" in text
    expect(page.locator("#job-restarts")).to_have_text("1")
    expect(page.locator(f"#job-{job['job']} .jobstate")).to_have_text("RUNNING")
    assert page.evaluate("window.__medbayNoReload === true"), "the page was reloaded"
    page.get_by_role("link", name=re.compile(r"remediation run \d+")).click()
    expect(page.locator("h1")).to_contain_text(f"Replace {failing}")
    problems.assert_none()
