"""What a researcher sees on the new-job form and the job page (#30 items 3 and 5)."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import ARTIFACTS, expect, log_in, watch_for_problems

pytestmark = pytest.mark.browser


def test_the_new_job_form_shows_every_problem_at_once_next_to_its_field(page, portal):
    log_in(page, portal, "alice")
    page.goto(f"{portal.url}/jobs/new")
    problems = watch_for_problems(page)
    expect(page.get_by_label("GPUs per node")).to_have_value("1")

    page.get_by_label("Job name").fill("my job")
    page.get_by_label("Nodes").fill("99")
    page.get_by_label("Memory").fill("lots")
    page.get_by_label("Working directory").fill("runs/bert")
    page.get_by_label("Command or script body").fill("train.py")
    preview = page.locator("#preview-errors")
    expect(preview).to_contain_text("Job name: Use 1-64 letters")
    expect(preview).to_contain_text("Nodes: train")
    expect(preview).to_contain_text("Memory: Use megabytes")
    expect(preview).to_contain_text("Working directory: Use an absolute path")
    expect(preview).not_to_contain_text("job_name")
    page.get_by_role("button", name="Submit job").click()

    for field in ("job_name", "nodes", "mem", "workdir"):
        expect(page.locator(f".field:has(#id_{field}) #error-{field}")).to_be_visible()
    expect(page.locator("#error-checkpoint_dir")).to_have_count(0)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "job-form-all-errors.png"), full_page=True)
    # The refused form answers 400 by design (and Chromium logs that); nothing else may fail.
    expected = (f"400 {portal.url}/jobs/new", "status of 400 (Bad Request)")
    assert [p for p in problems.errors if not p.endswith(expected)] == []


def test_cancelling_a_job_asks_for_confirmation_first(page, portal):
    job = portal.command("run_job", user="alice", name="e2e-confirm", gpus=8)["job"]
    log_in(page, portal, "alice")
    page.goto(f"{portal.url}/jobs/{job}/")
    problems = watch_for_problems(page)
    confirm = page.get_by_role("button", name=f"Yes, cancel job {job}")
    expect(confirm).to_be_hidden()

    page.locator("#cancel-job").click()

    expect(confirm).to_be_visible()
    expect(page.locator("#cancel-job-confirm")).to_contain_text("work since its last checkpoint")
    expect(page.locator(".jobstate").first).to_have_text("RUNNING")
    # A live update of the job's story while she decides keeps the question open.
    with page.expect_response(f"**/jobs/e2e/{job}/story"):
        page.evaluate("() => htmx.trigger('#job-story', 'medbay:refresh')")
    expect(confirm).to_be_visible()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "job-cancel-confirm.png"), full_page=True)
    confirm.click()

    expect(page.get_by_text(f"Job {job} cancelled.")).to_be_visible()
    problems.assert_none()
