"""One known day, worked out by hand: every tab that shows a figure shows the same number
for it, in its JSON, its CSV and on its page (issue 30: "Reports disagree with each other").

The day (2026-01-01, two nodes of 8 GPUs):
- gpu-01 fails at 06:00 (XID 79 on GPU 3: a critical incident, the node goes to fail)
  and is back at 09:00; a replace run, created 06:06, replaces the node 06:12-06:24 and
  finishes 06:30. A warning XID 31 on gpu-02 at 12:00 takes nothing out of service. A
  move of gpu-02 to inference succeeds at 14:00: not a repair.
- Job 1, 8 GPUs, runs 01:00-06:00 (checkpoint at 05:00), is requeued by the run at
  06:00, runs again 07:00-10:00 and reports its first step at 07:15.
- Job 2, 4 GPUs, runs 12:00-16:00.
- Slurm's accounting lists job 1's two attempts and job 2's one.
"""

from __future__ import annotations

import csv
import html
import io
import re
from datetime import timedelta

import pytest

from reports.base import formatted
from tests.reports.conftest import RANGE, at

pytestmark = pytest.mark.django_db

# By hand:
# - in service: gpu-01 21 h (out 06:00-09:00), gpu-02 24 h: 45 node-h, 8 x 45 = 360 GPU-h;
# - failures: 1 (the critical incident; its node's fall into fail is the same failure);
# - fault events: 2 (XID 79 and the warning XID 31);
# - MTBF: 45 / 1 = 45.0 node-h per node, 360 / 1 = 360.0 GPU-h per GPU;
# - MTTR: 06:00 to 06:30 = 30.0 min; repairs: 1 (the replace, not the move);
# - lost work: 8 GPUs x (06:00 - 05:00) = 8.0 GPU-h; restore: 8 x 15 min = 2.0 GPU-h;
# - node replacement: 8 GPUs x 06:12-06:24, while job 1 waited = 1.6 GPU-h;
# - requeued attempts: 8 GPUs x 01:00-06:00 = 40.0 GPU-h, of 80.0 in all (40 + 24 + 16).
EXPECTED = {
    "failures": 1,
    "fault_events": 2,
    "node_mtbf_h": 45.0,
    "gpu_mtbf_h": 360.0,
    "mttr_min": 30.0,
    "repairs": 1,
    "lost_gpu_h": 8.0,
    "restore_gpu_h": 2.0,
    "node_replacement_gpu_h": 1.6,
}
# The tabs whose summary shows each figure.
SHOWN_ON = {
    "failures": ("reliability", "failures"),
    "fault_events": ("reliability",),
    "node_mtbf_h": ("reliability", "failures"),
    "gpu_mtbf_h": ("reliability", "failures"),
    "mttr_min": ("reliability", "failures"),
    "repairs": ("reliability",),
    "lost_gpu_h": ("goodput", "ettr"),
    "restore_gpu_h": ("goodput", "ettr"),
    "node_replacement_gpu_h": ("ettr",),
}


@pytest.fixture
def day(history):
    from health.models import HealthEvent, Incident
    from jobs.models import AccountingJob, JobProgress
    from remediation.models import Remediation, RemediationJob, RemediationStep

    failing = history.node("gpu-01", [(0, "idle"), (6, "fail"), (9, "idle")])
    other = history.node("gpu-02", [(0, "idle")])
    incident = Incident.objects.create(
        node=failing, gpu_index=3, opened_at=at(6), last_event_at=at(6), severity="critical",
        xids=[79],
    )  # fmt: skip
    for node, hour, xid, severity in ((failing, 6, 79, "critical"), (other, 12, 31, "warning")):
        HealthEvent.objects.create(
            node=node, kind="xid", xid=xid, gpu_index=3, severity=severity,
            observed_at=at(hour), last_observed_at=at(hour), fold_key=f"x{hour}",
        )  # fmt: skip
    run = Remediation.objects.create(
        node=failing, action="replace", trigger="health_event", status="succeeded",
        reason="XID 79", incident=incident, created_at=at(6.1), finished_at=at(6.5),
    )  # fmt: skip
    RemediationStep.objects.create(
        remediation=run, index=0, name="replace", outcome="succeeded",
        started_at=at(6.2), finished_at=at(6.4),
    )  # fmt: skip
    Remediation.objects.create(
        node=other, action="to_inference", trigger="admin", status="succeeded", reason="serve",
        created_at=at(14), finished_at=at(14.2),
    )  # fmt: skip
    job = history.job(
        1, 8,
        [(0, "PENDING"), (1, "RUNNING"), (6, "PENDING", 1), (7, "RUNNING", 1),
         (10, "COMPLETED", 1)],
        state="COMPLETED", submit_at=at(0), start_at=at(1), end_at=at(10), restart_count=1,
    )  # fmt: skip
    RemediationJob.objects.create(
        remediation=run, slurm_job_id=1, effect="requeued", nodes=["gpu-01"], at=at(6)
    )
    JobProgress.objects.create(job=job, step=50, checkpoint_saved=True, reported_at=at(5))
    JobProgress.objects.create(job=job, step=51, restart_count=1, reported_at=at(7.25))
    small = history.job(
        2, 4, [(11, "PENDING"), (12, "RUNNING"), (16, "COMPLETED")],
        state="COMPLETED", submit_at=at(11), start_at=at(12), end_at=at(16),
    )  # fmt: skip
    for owner, submit, start, end, state, gpus, restarts in (
        (job, 0, 1, 6, "REQUEUED", 8, 0),
        (job, 6, 7, 10, "COMPLETED", 8, 1),
        (small, 11, 12, 16, "COMPLETED", 4, 0),
    ):
        AccountingJob.objects.create(
            cluster=failing.cluster, slurm_id=owner.slurm_id, job=owner, submit_at=at(submit),
            account="llm", user="alice", partition="train", qos="normal", state=state,
            start_at=at(start), end_at=at(end), elapsed_s=int((end - start) * 3600),
            gpus=gpus, restarts=restarts,
        )  # fmt: skip


def summary(client, name: str) -> dict:
    response = client.get(f"/api/v1/reports/{name}/", RANGE)
    assert response.status_code == 200, response.content
    return response.json()


def headline(client, name: str) -> dict[str, str]:
    """The page's summary: {label: value as printed}."""
    page = client.get(f"/reports/{name}/", RANGE).content.decode()
    block = page.split('class="summary"')[1].split("</div>\n")[0]
    pairs = re.findall(r"<strong>([^<]*)</strong><span class=\"muted\">([^<]*)</span>", block)
    return {html.unescape(label): html.unescape(value) for value, label in pairs}


def csv_rows(client, name: str, table: str) -> list[dict]:
    response = client.get(f"/api/v1/reports/{name}.csv", {**RANGE, "table": table})
    assert response.status_code == 200
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def test_every_tab_shows_the_hand_worked_figure_in_json_and_on_its_page(day, manager_client):
    from reports.base import LABELS

    for key, tabs in SHOWN_ON.items():
        for tab in tabs:
            assert summary(manager_client, tab)["summary"][key] == EXPECTED[key], (tab, key)
            shown = headline(manager_client, tab)
            assert shown[LABELS[key]] == formatted(EXPECTED[key]), (tab, key, shown)


def test_the_tables_and_csv_exports_count_the_same_failures(day, manager_client):
    mtbf = {row["scope"]: row for row in csv_rows(manager_client, "reliability", "mtbf")}
    assert mtbf["node"]["failures"] == mtbf["GPU"]["failures"] == "1"
    assert (mtbf["node"]["mtbf_h"], mtbf["GPU"]["mtbf_h"]) == ("45.0", "360.0")
    by_node = csv_rows(manager_client, "failures", "by_node")
    assert [(row["node"], row["failures"]) for row in by_node] == [("gpu-01", "1")]
    # Availability lists the fall into fail beside the failure, not added to it.
    faults = csv_rows(manager_client, "availability", "faults")
    assert [(r["node"], r["failures"], r["down_fail"]) for r in faults] == [("gpu-01", "1", "1")]
    lemons = csv_rows(manager_client, "lemons", "nodes")
    assert sum(int(row["failures"]) for row in lemons) == 1
    events = csv_rows(manager_client, "reliability", "faults")
    assert sum(int(row["events"]) for row in events) == EXPECTED["fault_events"]


def test_moving_a_node_to_inference_is_not_a_repair(day, manager_client):
    repairs = csv_rows(manager_client, "reliability", "mttr")
    assert [(row["action"], row["runs"]) for row in repairs] == [("Replace", "1")]
    # The remediation tab still lists every run, under the action's name.
    runs = csv_rows(manager_client, "remediation", "runs")
    assert sorted(row["action"] for row in runs) == ["Move to inference", "Replace"]


def test_goodput_and_ettr_split_the_same_lost_work(day, manager_client):
    goodput = summary(manager_client, "goodput")
    assert goodput["summary"]["allocated_gpu_h"] == 80.0  # 8 x (5 + 3) + 4 x 4
    assert goodput["summary"]["productive_gpu_h"] == 70.0
    ettr = summary(manager_client, "ettr")
    account = ettr["tables"]["by_account"]["rows"][0]
    # ETTR splits lost work into lost progress, detection and checkpoint grace.
    split = sum(account[f"{part}_gpu_h"] for part in ("lost_progress", "detection"))
    assert split + account["checkpoint_grace_gpu_h"] == goodput["summary"]["lost_gpu_h"]
    assert account["restore_gpu_h"] == goodput["summary"]["restore_gpu_h"]
    assert account["node_replacement_gpu_h"] == EXPECTED["node_replacement_gpu_h"]
    assert account["productive_gpu_h"] == goodput["summary"]["productive_gpu_h"]


def test_accounting_counts_requeued_attempts_and_agrees_with_allocated_time(day, manager_client):
    usage = csv_rows(manager_client, "accounting", "usage")
    assert [(r["group"], r["gpu_h"], r["restarts"], r["requeued_gpu_h"])
            for r in usage] == [("llm", "80.0", "1", "40.0")]  # fmt: skip
    allocated = summary(manager_client, "goodput")["summary"]["allocated_gpu_h"]
    assert summary(manager_client, "accounting")["summary"]["GPU-h"] == allocated


def test_an_accounting_without_requeued_attempts_shows_no_false_zero(day, manager_client):
    from jobs.models import AccountingJob

    AccountingJob.objects.filter(state="REQUEUED").delete()
    usage = summary(manager_client, "accounting")["tables"]["usage"]["rows"]
    assert usage[0]["restarts"] == 1 and usage[0]["requeued_gpu_h"] is None


def test_repair_times_count_from_the_failure_not_from_the_run(day, manager_client):
    from remediation.models import Remediation

    # A second, later run on the same incident found nothing left to repair.
    Remediation.objects.create(
        node=Remediation.objects.get(action="replace").node, action="reboot",
        trigger="health_event", status="succeeded", reason="again",
        incident=Remediation.objects.get(action="replace").incident,
        created_at=at(8), finished_at=at(8) + timedelta(minutes=5),
    )  # fmt: skip
    for tab in ("reliability", "failures"):
        assert summary(manager_client, tab)["summary"]["mttr_min"] == 30.0


def figures_of(name: str, **params) -> list[dict]:
    from reports.catalog import compute
    from reports.charts import figures
    from reports.params import ReportForm

    form = ReportForm({**RANGE, **params})
    assert form.is_valid(), form.errors
    return figures(compute(name, form.query()))


def test_badput_has_its_own_scale_beside_the_kept_time(day):
    lost, kept = figures_of("goodput")
    assert [(t["name"], t["y"]) for t in lost["data"]] == [("lost work", [8.0]), ("restore", [2.0])]
    assert kept["data"][0]["y"] == [87.5]  # 70 of 80 GPU-h kept
    badput, _ = figures_of("ettr")
    names = [trace["name"] for trace in badput["data"]]
    assert "productive" not in names and "node replacement" in names


def test_charts_name_actions_and_axes_in_words(day):
    for name in ("reliability", "remediation", "goodput", "ettr", "failures", "availability"):
        for figure in figures_of(name):
            words = [trace.get("name") or "" for trace in figure["data"]]
            words += [str(x) for trace in figure["data"] for x in trace.get("x") or ()]
            words.append(figure["layout"]["yaxis"]["title"]["text"])
            assert not [word for word in words if "_" in word], (name, words)
    _, repair = figures_of("reliability")
    assert repair["data"][0]["x"] == ["Replace"]  # the move to inference is no repair


def test_the_day_still_in_progress_is_marked_so_far_not_drawn_as_a_dip(history):
    from django.utils import timezone

    history.node("gpu-01", [(0, "idle")])
    today = timezone.localdate()
    start = (today - timedelta(days=2)).isoformat()
    (figure,) = figures_of("utilization", start=start, end=today.isoformat())
    xs = figure["data"][0]["x"]
    assert xs[-1] == f"{today.isoformat()} (so far)"
    assert not any("so far" in x for x in xs[:-1])
    (past,) = figures_of("utilization")  # a day that is over is not marked
    assert not any("so far" in x for x in past["data"][0]["x"])
