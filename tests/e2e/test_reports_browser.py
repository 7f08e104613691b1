"""The manager's reports in a real browser: plotly draws, filters re-render via htmx."""

from __future__ import annotations

import re
from datetime import date, timedelta

import pytest

from tests.e2e.conftest import (
    ARTIFACTS,
    WATCH_SOCKET,
    expect,
    log_in,
    report_history,
    watch_for_problems,
)

pytestmark = pytest.mark.browser

REPLAYED_DAYS_AGO = 60


@pytest.fixture(scope="module")
def history(portal):
    return report_history(portal)


def test_a_manager_sees_a_plotly_chart_and_a_filter_redraws_it_without_a_reload(
    page, portal, history
):
    page.add_init_script(WATCH_SOCKET)
    log_in(page, portal, "manager")

    page.goto(f"{portal.url}/reports/")
    figure = page.locator("#report-body .plotly-figure").first
    expect(figure.locator(".plot-container svg").first).to_be_attached()
    expect(page.locator("#report-utilization h2")).to_contain_text("utilization")
    page.evaluate("document.getElementById('report-body').firstElementChild.dataset.old = '1'")

    page.get_by_label("Time bucket").select_option("week")

    expect(page).to_have_url(re.compile(r"bucket=week"))
    expect(page.locator("#report-body [data-old]")).to_have_count(0)
    expect(figure.locator(".plot-container svg").first).to_be_attached()
    assert page.evaluate("window.__medbayNoReload === true"), "the page was reloaded"
    expect(page.get_by_label("Time bucket")).to_have_value("week")


def test_a_manager_switches_report_tabs_in_place_and_the_filters_follow_the_tab(
    page, portal, history
):
    page.add_init_script(WATCH_SOCKET)
    log_in(page, portal, "manager")
    page.goto(f"{portal.url}/reports/")

    page.locator(".report-tabs").get_by_role("link", name="Reliability").click()

    expect(page).to_have_url(re.compile(r"/reports/reliability/"))
    expect(page.locator("#report-reliability h2")).to_contain_text(re.compile("reliability", re.I))
    expect(page.locator("#report-utilization")).to_have_count(0)
    expect(page.locator(".report-tabs a.current")).to_have_text("Reliability")
    expect(page.locator("#report-reliability .plot-container svg").first).to_be_attached()
    page.get_by_label("Time bucket").select_option("week")
    expect(page).to_have_url(re.compile(r"/reports/reliability/\?.*bucket=week"))
    expect(page.locator("#report-reliability")).to_have_count(1)
    expect(page.locator("#report-utilization")).to_have_count(0)
    assert page.evaluate("window.__medbayNoReload === true"), "the page was reloaded"


def test_a_manager_reads_one_cluster_and_the_tabs_keep_it(page, portal, history):
    portal.command("cluster_row", name="e2e-west")
    page.add_init_script(WATCH_SOCKET)
    log_in(page, portal, "manager")
    page.goto(f"{portal.url}/reports/")
    expect(page.locator("#report-utilization h2")).to_contain_text("all clusters")

    page.get_by_label("Cluster").select_option("e2e-west")

    expect(page).to_have_url(re.compile(r"cluster=e2e-west"))
    expect(page.locator("#report-utilization h2")).to_contain_text("cluster e2e-west")
    # A cluster without history has none to show.
    expect(page.locator("#report-utilization .banner-warn")).to_contain_text("No history")
    page.locator(".report-tabs").get_by_role("link", name="Reliability").click()
    expect(page).to_have_url(re.compile(r"/reports/reliability/\?.*cluster=e2e-west"))
    expect(page.locator("#report-reliability h2")).to_contain_text("cluster e2e-west")
    expect(page.get_by_label("Cluster")).to_have_value("e2e-west")
    assert page.evaluate("window.__medbayNoReload === true"), "the page was reloaded"


def test_a_manager_reads_gpu_hours_by_team_then_by_qos_from_slurms_accounting(page, portal):
    """The recorded accounting of a day: alice (vision) 2 GPUs x 3 s, then 8 x 4 s and
    8 x 30 s over a requeue; bob (nlp) 1 x 2 s under QOS high and 8 x 9 s. It is replayed
    on a day well before the history other tests generate, which the report would add."""
    day = (date.today() - timedelta(days=REPLAYED_DAYS_AGO)).isoformat()
    assert portal.command("recorded_accounting", day=day)["records"] == 5
    page.add_init_script(WATCH_SOCKET)
    log_in(page, portal, "manager")
    page.goto(f"{portal.url}/reports/accounting/?start={day}&end={day}&group_by=account")
    section = page.locator("#report-accounting")
    expect(section.locator("h2")).to_contain_text("Usage by account")
    rows = section.locator("table tbody tr")
    expect(rows).to_have_count(2)
    # vision: 6 + 32 + 240 = 278 GPU-seconds; nlp: 2 + 72 = 74.
    expect(rows.nth(0)).to_contain_text("vision")
    expect(rows.nth(0)).to_contain_text("278")
    expect(rows.nth(1)).to_contain_text("nlp")
    expect(rows.nth(1)).to_contain_text("74")
    expect(section.locator(".plot-container svg").first).to_be_attached()

    page.get_by_label("Group by").select_option("qos")

    expect(page).to_have_url(re.compile(r"group_by=qos"))
    expect(section.locator("table tbody tr")).to_have_count(2)
    expect(section.locator("table tbody tr").nth(0)).to_contain_text("normal")
    high = section.locator("table tbody tr").nth(1)
    expect(high).to_contain_text("high")
    expect(high).to_contain_text("74")
    expect(section.get_by_role("link", name="CSV")).to_have_attribute(
        "href", re.compile(r"accounting\.csv\?.*group_by=qos")
    )
    assert page.evaluate("window.__medbayNoReload === true"), "the page was reloaded"


def test_a_manager_reads_the_ettr_of_a_requeued_job_slurm_recorded_before_medbay(page, portal):
    """The same recorded day: alice's job 3 ran 4 s on 8 GPUs, was requeued, waited 9 s
    and ran 30 s. Medbay has no row of it, so its ETTR comes from the accounting alone."""
    day = (date.today() - timedelta(days=REPLAYED_DAYS_AGO)).isoformat()
    assert portal.command("recorded_accounting", day=day)["records"] == 5
    page.add_init_script(WATCH_SOCKET)
    log_in(page, portal, "manager")
    page.goto(f"{portal.url}/reports/ettr/?start={day}&end={day}")
    section = page.locator("#report-ettr")
    expect(section.locator("h2")).to_contain_text("ETTR")
    job = section.locator("tr", has_text="Slurm accounting")
    expect(job).to_have_count(1)
    expect(job).to_contain_text("69.8")  # 30 of 43 s productive
    expect(job).to_contain_text("lost progress, restore")
    vision = section.locator("tr", has=page.get_by_role("cell", name="vision", exact=True))
    expect(vision.first).to_contain_text("70.3")  # with job 1: (2 x 3 + 8 x 30) / (2 x 3 + 8 x 43)
    expect(section).to_contain_text("before it was installed")


# A figure as the page prints it: thousands separated, one decimal ("175,934.7"); a small
# non-zero value keeps two significant digits ("0.04", "1.2e-05": reports.base.formatted).
FORMATTED = re.compile(r"^-?\d{1,3}(,\d{3})*(\.\d)?$|^—$|^-?0\.0+[1-9]\d?$|^-?\d(\.\d)?e-\d+$")
RAW_NAME = re.compile(r"\b[a-z]+_[a-z_]+\b")


def chart_words(page, figure) -> list[str]:
    """Every legend entry, tick label and axis title a person reads on a chart."""
    return figure.evaluate(
        "el => Array.from(el.querySelectorAll('.legendtext, .xtick text, .g-ytitle text, "
        ".g-xtitle text, .gtitle')).map(t => t.textContent)"
    )


def test_a_manager_sees_badput_on_its_own_scale_in_words_with_formatted_figures(
    page, portal, history
):
    problems = watch_for_problems(page)
    log_in(page, portal, "manager")
    page.goto(f"{portal.url}/reports/goodput/")
    section = page.locator("#report-goodput")
    badput = section.locator(".plotly-figure").first
    # The chart's title is a heading above it, clear of plotly's toolbar.
    title = section.locator("h3.figure-title").first
    expect(title).to_have_text(re.compile("Lost work and restore"))
    expect(badput.locator(".plot-container svg").first).to_be_attached()
    # The lost-work bars are drawn tall enough to see, not a sliver on a 99.8 % stack.
    heights = badput.evaluate(
        "el => Array.from(el.querySelectorAll('.bars .point path'))"
        ".map(p => p.getBoundingClientRect().height)"
    )
    assert heights and max(heights) > 40, heights
    for figure in section.locator(".plotly-figure").all():
        words = chart_words(page, figure)
        assert words and not [w for w in words if RAW_NAME.search(w)], words
    values = section.locator(".summary strong").all_text_contents()
    assert values and all(FORMATTED.match(value) for value in values), values
    # The account table's figures (the jobs table's first column is a Slurm job id).
    cells = section.locator("#table-goodput-by_account tbody td").all_text_contents()
    numbers = [cell for cell in cells if re.match(r"^-?[\d,.]+$", cell)]
    assert numbers and all(FORMATTED.match(cell) for cell in numbers), numbers
    page.screenshot(path=str(ARTIFACTS / "reports-goodput-badput.png"), full_page=True)
    problems.assert_none()


def test_the_remediation_tab_names_actions_in_words_and_offers_no_idle_filters(
    page, portal, history
):
    problems = watch_for_problems(page)
    log_in(page, portal, "manager")
    page.goto(f"{portal.url}/reports/remediation/")
    figure = page.locator("#report-remediation .plotly-figure").first
    expect(figure.locator(".plot-container svg").first).to_be_attached()
    words = chart_words(page, figure)
    page.screenshot(path=str(ARTIFACTS / "reports-remediation.png"), full_page=True)
    assert "Replace" in words and not [w for w in words if RAW_NAME.search(w)], words
    filters = page.locator("form.filters")
    expect(filters.get_by_label("Group by")).to_have_count(0)
    expect(filters.get_by_label("Time bucket")).to_have_count(0)
    page.locator(".report-tabs").get_by_role("link", name="Utilization").click()
    expect(page.locator("form.filters").get_by_label("Time bucket")).to_be_visible()
    expect(page.locator("form.filters").get_by_label("Group by")).to_be_visible()
    problems.assert_none()


def test_the_printable_reports_have_margins_on_screen_and_on_paper(page, portal, history):
    problems = watch_for_problems(page)
    log_in(page, portal, "manager")
    page.goto(f"{portal.url}/reports/?print=1")
    expect(page.locator("#report-utilization h2")).to_be_visible()
    heading = page.locator("main h1").bounding_box()
    assert heading["x"] >= 16, heading  # not flush against the window's edge
    margins = page.evaluate(
        "() => Array.from(document.styleSheets).flatMap(sheet => Array.from(sheet.cssRules))"
        ".filter(rule => rule.type === CSSRule.PAGE_RULE).map(rule => rule.style.margin)"
    )
    assert margins and all(margin and margin != "0px" for margin in margins), margins
    # Today is not over: its point is marked, not drawn as a dip among whole days.
    figure = page.locator("#report-utilization .plotly-figure").first
    expect(figure.locator(".xtick text").last).to_have_text(re.compile(r"\(so far\)$"))
    page.screenshot(path=str(ARTIFACTS / "reports-print.png"))
    problems.assert_none()
