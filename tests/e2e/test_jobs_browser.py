"""A researcher's job in a real browser: live sbatch preview, submit, live queue row."""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import WATCH_SOCKET, expect, log_in, wait_for_socket

pytestmark = pytest.mark.browser


def test_a_researcher_submits_a_job_and_watches_it_start_in_the_queue(page, portal):
    page.add_init_script(WATCH_SOCKET)
    log_in(page, portal, "alice")
    page.goto(f"{portal.url}/jobs/new")
    preview = page.locator("#preview")
    expect(preview).not_to_contain_text("#SBATCH")

    page.get_by_label("Job name").fill("e2e-bert")
    page.get_by_label("GPUs per node").fill("2")
    page.get_by_label("Working directory").fill("/home/alice/bert")
    page.get_by_label("Command or script body").fill("train.py --epochs 3")
    script = page.locator("#script-preview")
    expect(script).to_contain_text("#SBATCH --job-name=e2e-bert")
    expect(script).to_contain_text("train.py --epochs 3")
    page.get_by_label("Job name").fill("e2e-bert-large")
    expect(script).to_contain_text("#SBATCH --job-name=e2e-bert-large")
    page.get_by_role("button", name="Submit job").click()

    expect(page).to_have_url(re.compile(r"/jobs/[\w.-]+/\d+/$"))
    job_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
    page.get_by_role("link", name="Jobs", exact=True).first.click()
    expect(page).to_have_url(f"{portal.url}/jobs/")
    row = page.locator(f"#job-{job_id}")
    expect(row).to_contain_text("e2e-bert-large")
    expect(row.locator(".jobstate")).to_have_text("PENDING")
    wait_for_socket(page)

    portal.command("step", seconds=1)

    expect(row.locator(".jobstate")).to_have_text("RUNNING", timeout=3000)
    assert page.evaluate("window.__medbayNoReload === true"), "the page was reloaded"


def test_a_researcher_sees_what_to_fix_in_the_preview_before_submitting(page, portal):
    log_in(page, portal, "alice")
    page.goto(f"{portal.url}/jobs/new")

    page.get_by_label("Job name").fill("e2e-too-big")
    page.get_by_label("GPUs per node").fill("64")
    page.get_by_label("Working directory").fill("/home/alice/big")
    page.get_by_label("Command or script body").fill("train.py")

    expect(page.locator("#preview-errors")).to_contain_text("at most 8 GPUs")
    expect(page.locator("#script-preview")).to_have_count(0)
