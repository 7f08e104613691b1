"""Reports read months of node history once per report, whatever else they show."""

from django.db import connection
from django.test.utils import CaptureQueriesContext

from reports.catalog import compute
from reports.params import ReportForm
from tests.reports import conftest as reports

RANGE = reports.RANGE
# The reports' hand-built history, with its known answers.
history = reports.history


def report(name: str):
    form = ReportForm({**RANGE, "group_by": "day"})
    assert form.is_valid(), form.errors
    with CaptureQueriesContext(connection) as captured:
        computed = compute(name, form.query())
    windows = [q["sql"] for q in captured.captured_queries if "LEAD(" in q["sql"].upper()]
    return computed, windows


def test_availability_reads_the_node_history_once_for_its_chart_and_downtime_table(history):
    history.node("gpu-a", [(0, "idle"), (6, "down"), (9, "idle")], gpus=8)
    history.node("gpu-b", [(0, "idle"), (12, "drained"), (20, "idle")], gpus=8)
    history.node("gpu-c", [(0, "allocated")], gpus=4)
    availability, windows = report("availability")
    assert len(windows) == 1
    downtime = availability.table("downtime").rows
    assert [(row["node"], row["downtime_h"]) for row in downtime] == [
        ("gpu-b", 8.0),
        ("gpu-a", 3.0),
    ]
    assert availability.summary["installed_gpu_h"] == 24 * 20
    assert availability.summary["healthy_gpu_h"] == 24 * 20 - 8 * 8 - 3 * 8


def test_availability_and_reliability_agree_on_in_service_hours(history):
    history.node("gpu-a", [(0, "idle"), (6, "down"), (9, "idle")], gpus=8)
    availability, _ = report("availability")
    reliability, _ = report("reliability")
    in_service = {row["scope"]: row["in_service_h"] for row in reliability.table("mtbf").rows}
    assert in_service["node"] == 24 - 3
    assert in_service["GPU"] == availability.summary["healthy_gpu_h"]
