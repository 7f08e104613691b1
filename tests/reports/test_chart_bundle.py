"""Report pages load plotly's basic bundle, a quarter of the full one's size, which draws
three kinds of trace: a chart of any other kind would be an empty box on the page, with
"Unrecognized trace type" in the console."""

from __future__ import annotations

import json
import re

import pytest
from django.conf import settings

from reports.catalog import REPORTS
from tests.reports.conftest import RANGE

pytestmark = pytest.mark.django_db

# What npm's plotly.js-basic-dist-min contains, by its README.
BASIC_BUNDLE_TRACES = {"bar", "pie", "scatter"}
FIGURE_DATA = re.compile(r'<script id="figure-data-[^"]+" type="application/json">(.*?)</script>')
PLOTLY_SCRIPT = re.compile(r'<script src="/static/(vendor/plotly[^"]*\.js)"')


def test_every_report_draws_only_traces_the_basic_bundle_has(history, manager_client):
    history.node("gpu-01", [(0, "idle"), (6, "down"), (12, "idle")])
    history.job(1, 8, [(2, "PENDING"), (4, "RUNNING"), (10, "COMPLETED")])
    drawn: dict[str, set[str]] = {}
    for name in REPORTS:
        html = manager_client.get(f"/reports/{name}/", RANGE).content.decode()
        for data in FIGURE_DATA.findall(html):
            for trace in json.loads(data)["data"]:
                drawn.setdefault(trace.get("type", "scatter"), set()).add(name)

    assert {"bar", "scatter"} <= set(drawn), f"the reports drew {drawn}"
    others = {kind: names for kind, names in drawn.items() if kind not in BASIC_BUNDLE_TRACES}
    assert not others, f"traces the basic bundle cannot draw: {others}"


def test_report_pages_load_the_basic_bundle_from_static(manager_client):
    html = manager_client.get("/reports/", RANGE).content.decode()
    scripts = PLOTLY_SCRIPT.findall(html)

    assert len(scripts) == 1, scripts
    bundle = settings.BASE_DIR / "static" / scripts[0]
    assert bundle.read_text()[:200].count("plotly.js (basic - minified)") == 1
