"""Who may read reports, how bad filters are answered, and the exports."""

from __future__ import annotations

import csv
import io
import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from reports.base import IDENTIFIERS, formatted
from tests.reports.conftest import RANGE, at

pytestmark = pytest.mark.django_db

NAMES = [
    "utilization",
    "training_share",
    "availability",
    "reliability",
    "goodput",
    "remediation",
    "accounting",
    "lemons",
    "failures",
    "ettr",
]


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_researcher_gets_403_from_the_page_and_the_api(researcher):
    client = logged_in(researcher)
    assert client.get("/reports/").status_code == 403
    response = client.get("/api/v1/reports/utilization/")
    assert response.status_code == 403
    assert response.json()["detail"]
    assert client.get("/api/v1/reports/utilization.csv").status_code == 403


def test_anonymous_visitors_are_sent_to_login_or_get_401(db):
    client = Client()
    page = client.get("/reports/availability/")
    assert page.status_code == 302 and "/login/" in page["Location"]
    assert client.get("/api/v1/reports/availability/").status_code == 401
    assert client.get("/api/v1/reports/availability.csv").status_code == 401


@pytest.mark.parametrize("name", NAMES)
def test_managers_and_admins_see_every_report_with_a_plotly_figure(
    name, manager_client, admin_client, history
):
    history.node("gpu-01", [(0, "idle"), (6, "down")])
    for client in (manager_client, admin_client):
        response = client.get(f"/reports/{name}/", RANGE)
        assert response.status_code == 200
        html = response.content.decode()
        assert f'id="figure-data-{name}-1"' in html
        assert "vendor/plotly-" in html
        # Nothing loaded from elsewhere. (A bare "cdn" search once matched a CSRF token.)
        assert not re.search(r'(?:src|href)="(?:https?:)?//', html)


@pytest.mark.parametrize("name", ["goodput", "reliability", "utilization"])
def test_the_headline_figures_are_labelled_in_words_and_the_exports_keep_their_keys(
    name, manager_client, history
):
    history.node("gpu-01", [(0, "idle"), (6, "down")])
    html = manager_client.get(f"/reports/{name}/", RANGE).content.decode()
    labels = re.findall(r'<span class="muted">([^<]*)</span>', html.split('class="summary"')[1])
    assert labels and not any("_" in label for label in labels), labels
    label, key = {
        "goodput": ("allocated GPU-h", "allocated_gpu_h"),
        "reliability": ("MTBF per GPU (GPU-h)", "gpu_mtbf_h"),
        "utilization": ("utilization %", "utilization_pct"),
    }[name]
    assert label in labels
    assert key in manager_client.get(f"/api/v1/reports/{name}/", RANGE).json()["summary"]


def test_the_page_shows_a_form_error_for_bad_filters_not_a_500(manager_client):
    response = manager_client.get("/reports/", {"start": "2026-13-40", "group_by": "planet"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "Please fix the filters" in html
    assert "Enter a valid date" in html and "planet" in html


def test_the_api_answers_bad_filters_with_field_errors(manager_client):
    response = manager_client.get(
        "/api/v1/reports/goodput/", {"start": "2026-02-10", "end": "2026-02-01"}
    )
    assert response.status_code == 400
    assert response.json()["errors"]["end"] == ["The end date must not be before the start date."]
    too_long = manager_client.get("/api/v1/reports/goodput.csv", {"start": "2020-01-01"})
    assert too_long.status_code == 400 and "start" in too_long.json()["errors"]
    assert manager_client.get("/api/v1/reports/nothing/").status_code == 404
    bad_table = manager_client.get("/api/v1/reports/goodput.csv", {"table": "nope"})
    assert bad_table.status_code == 400 and "table" in bad_table.json()["errors"]


def test_htmx_filters_replace_only_the_report_body(manager_client, history):
    history.node("gpu-01", [(0, "idle")])
    response = manager_client.get(
        "/reports/utilization/",
        {**RANGE, "group_by": "pool"},
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="report-body",
    )
    html = response.content.decode()
    assert "<html" not in html and 'id="report-utilization"' in html
    assert "<td>training</td>" in html


def test_the_printable_page_has_every_report(manager_client):
    response = manager_client.get("/reports/", {**RANGE, "print": "1"})
    html = response.content.decode()
    # The print rules are static files (the Content-Security-Policy refuses inline <style>).
    assert "css/reports.css" in html and "css/reports_print.css" in html
    assert 'class="topbar"' not in html
    for name in NAMES:
        assert f'id="report-{name}"' in html


@pytest.mark.parametrize("name", NAMES)
def test_csv_rows_equal_the_json_and_html_table(name, manager_client, history):
    node = history.node("gpu-01", [(0, "idle"), (6, "down"), (9, "idle")])
    history.job(1, 8, [(1, "RUNNING"), (2, "PENDING"), (3, "RUNNING", 1), (7, "COMPLETED")])
    from remediation.models import Remediation

    Remediation.objects.create(node=node, action="reboot", trigger="admin", reason="x")
    body = manager_client.get(f"/api/v1/reports/{name}/", RANGE).json()
    page = manager_client.get(f"/reports/{name}/", RANGE).content.decode()
    for table_name, table in body["tables"].items():
        response = manager_client.get(f"/api/v1/reports/{name}.csv", {**RANGE, "table": table_name})
        assert response["Content-Type"].startswith("text/csv")
        rows = list(csv.reader(io.StringIO(response.content.decode())))
        assert rows[0] == table["columns"]
        expected = [
            ["" if row[key] is None else str(row[key]) for key in table["columns"]]
            for row in table["rows"]
        ]
        assert rows[1:] == expected
        for row in table["rows"]:
            # The page prints the same numbers, thousands separated with one decimal.
            shown = [
                row[key] if key in IDENTIFIERS else formatted(row[key]) for key in table["columns"]
            ]
            cells = "".join(f"<td>{'—' if cell in (None, '') else cell}</td>" for cell in shown)
            assert cells in page


def build(history, first: int, size: int) -> None:
    """`size` nodes and jobs, each with faults, progress and a remediation run."""
    from health.models import HealthEvent, Incident
    from jobs.models import JobProgress
    from remediation.models import Remediation

    for index in range(first, first + size):
        node = history.node(f"gpu-{index:02d}", [(0, "idle"), (index % 5 + 1, "down"), (9, "idle")])
        job = history.job(
            index + 1, 8, [(1, "RUNNING"), (2, "PENDING"), (3, "RUNNING", 1), (7, "COMPLETED")]
        )
        JobProgress.objects.create(job=job, step=1, checkpoint_saved=True, reported_at=at(1.5))
        Remediation.objects.create(
            node=node, action="reboot", trigger="admin", reason="x", status="succeeded",
            created_at=at(2), finished_at=at(2.2),
        )  # fmt: skip
        HealthEvent.objects.create(
            node=node, kind="xid", xid=79, severity="critical", fold_key=str(index),
            observed_at=at(1), last_observed_at=at(1),
        )  # fmt: skip
        Incident.objects.create(
            node=node, opened_at=at(1), last_event_at=at(1), severity="critical", gpu_index=0
        )


def queries_for(client) -> dict[str, int]:
    counts = {}
    for name in NAMES:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(f"/api/v1/reports/{name}/", RANGE).status_code == 200
        counts[name] = len(captured)
    return counts


def test_the_number_of_queries_does_not_grow_with_the_history(history, manager_client):
    build(history, 0, 2)
    small = queries_for(manager_client)
    build(history, 2, 12)
    assert queries_for(manager_client) == small
    assert all(small.values())


@pytest.mark.parametrize(
    ("name", "groupings", "bucket"),
    [
        ("utilization", ["none", "partition", "pool", "account", "user"], True),
        ("reliability", [], True),
        ("goodput", ["account", "user"], False),
        ("accounting", ["account", "user", "partition", "qos"], False),
        ("remediation", [], False),
        ("ettr", [], False),
        ("failures", [], False),
        ("lemons", [], False),
    ],
)
def test_a_tab_offers_only_the_filters_that_change_it(name, groupings, bucket, manager_client):
    page = manager_client.get(f"/reports/{name}/", RANGE).content.decode()
    form = page.split('class="filters"')[1].split("</form>")[0]
    offered = re.findall(r"<option value=\"[^\"]*\"[^>]*>([^<]*)</option>", form)
    group_select = form.split('name="group_by"')[1].split("</select>")[0] if groupings else ""
    assert ("Group by" in form) == bool(groupings)
    assert re.findall(r">([^<]*)</option>", group_select) == groupings
    assert ("Time bucket" in form) == bucket
    assert len(offered) == len(groupings) + (2 if bucket else 0)


def test_the_time_bucket_alone_sets_the_bucket(history, manager_client):
    history.node("gpu-01", [(0, "idle")])
    body = manager_client.get(
        "/api/v1/reports/availability/",
        {"start": "2026-01-01", "end": "2026-01-14", "bucket": "week"},
    ).json()
    assert [row["bucket"] for row in body["tables"]["availability"]["rows"]] == [
        "2026-01-01",
        "2026-01-08",
    ]
