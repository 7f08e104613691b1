"""Training and inference follow demand, in Chromium: the Capacity page as each role that
may open it, and a demand proposal's evidence on the approval card and the run page, at
a desktop's width and a phone's (390 px), with no console error or failed request."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import ARTIFACTS, expect, log_in, watch_for_problems

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1440, "height": 900}
SIZES = [PHONE, DESKTOP]
IDS = ["390", "1440"]
FITS = "() => document.documentElement.scrollWidth <= window.innerWidth"


@pytest.fixture(scope="module")
def proposal(portal):
    portal.command("fresh_training")
    made = portal.command("demand_proposal")
    assert made["run"], "the policy proposed nothing"
    yield made
    # Leave no waiting run for the approval queue's own tests.
    portal.command("decide", run=made["run"], verdict="reject", comment="e2e: capacity done")
    portal.command("fresh_training")


def open_as(browser, portal, username: str, size: dict):
    context = browser.new_context(viewport=size)
    page = context.new_page()
    page.set_default_timeout(10_000)
    log_in(page, portal, username)
    expect(page.locator("header .who")).to_contain_text(username)
    return context, page


def shot(page, name: str, size: dict) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"capacity-{name}-{size['width']}.png"), full_page=True)


@pytest.mark.parametrize("size", SIZES, ids=IDS)
@pytest.mark.parametrize("username", ["manager", "admin"])
def test_the_capacity_page_draws_the_pools_and_signals_and_fits_the_screen(
    browser, portal, proposal, username, size
):
    context, page = open_as(browser, portal, username, size)
    problems = watch_for_problems(page)
    try:
        page.goto(f"{portal.url}/capacity/")
        expect(page.locator("h1")).to_contain_text("Capacity")
        for name in ("pools", "load", "training"):
            expect(page.locator(f"#figure-{name} .plot-container svg").first).to_be_attached()
        expect(page.locator("#capacity-gpu-hours")).to_contain_text("GPU-hours by pool per day")
        decisions = page.locator("#capacity-decisions")
        if username == "admin":
            expect(decisions).to_contain_text(f"run {proposal['run']}")
            expect(page.locator("#capacity-policies")).to_contain_text("Last decided")
        else:
            expect(decisions).to_have_count(0)
        shot(page, username, size)
        assert page.evaluate(FITS), "the Capacity page scrolls sideways"
        problems.assert_none()
    finally:
        context.close()


def test_a_researcher_is_refused_the_capacity_page(browser, portal, proposal):
    context, page = open_as(browser, portal, "alice", DESKTOP)
    try:
        answer = context.request.get(f"{portal.url}/capacity/")
        assert answer.status == 403
        expect(page.locator("header nav")).not_to_contain_text("Capacity")
    finally:
        context.close()


@pytest.mark.parametrize("size", SIZES, ids=IDS)
def test_the_approval_card_and_the_run_page_show_the_demand_evidence_and_its_chart(
    browser, portal, proposal, size
):
    run = proposal["run"]
    first_clause = proposal["sentence"].split(";")[0]
    context, page = open_as(browser, portal, "admin", size)
    problems = watch_for_problems(page)
    try:
        pages = (("approval", "/remediation/approvals/"), ("run", f"/remediation/{run}/"))
        for name, path in pages:
            page.goto(f"{portal.url}{path}")
            evidence = page.locator(f"#demand-evidence-{run}")
            expect(evidence).to_contain_text(first_clause)
            expect(evidence.locator(".plot-container svg").first).to_be_attached()
            shot(page, name, size)
            assert page.evaluate(FITS), f"{path} scrolls sideways"
        problems.assert_none()
    finally:
        context.close()


def test_a_manager_sees_the_run_page_evidence_but_no_approval_buttons(browser, portal, proposal):
    context, page = open_as(browser, portal, "manager", PHONE)
    problems = watch_for_problems(page)
    try:
        page.goto(f"{portal.url}/remediation/{proposal['run']}/")
        expect(page.locator(f"#demand-evidence-{proposal['run']}")).to_be_visible()
        expect(page.get_by_role("button", name="Approve")).to_have_count(0)
        problems.assert_none()
    finally:
        context.close()
