"""MTBF and MTTR by XID, GPU model and node: known answers from a hand-built day."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.reports.conftest import RANGE, at

pytestmark = pytest.mark.django_db


@pytest.fixture
def day(history, admin_user):
    """Two 8-GPU nodes in service all day: gpu-01 (H100) and gpu-02 (A100).

    gpu-01: XID 79 at 02:00 healed automatically by 02:30; XID 48 at 05:00 healed
    by 06:00 after an admin approved the run. gpu-02: XID 79 at 10:00, no repair.
    """
    from clusters.models import Gpu
    from health.models import Incident, Severity
    from remediation.models import Remediation, RemediationStatusChange
    from remediation.transitions import RunStatus

    nodes = {}
    for name, model in (("gpu-01", "H100"), ("gpu-02", "A100")):
        nodes[name] = history.node(name, [(0, "idle")])
        Gpu.objects.bulk_create(Gpu(node=nodes[name], index=i, model=model) for i in range(8))

    def fault(node, hour, xid, healed_after_h=None, approved_by=None):
        incident = Incident.objects.create(
            node=nodes[node], gpu_index=1, opened_at=at(hour), last_event_at=at(hour),
            severity=Severity.CRITICAL, xids=[xid],
        )  # fmt: skip
        if healed_after_h is None:
            return
        run = Remediation.objects.create(
            node=nodes[node], action="drain", trigger="health_event", status=RunStatus.SUCCEEDED,
            reason=f"xid {xid}", incident=incident, approved_by=approved_by,
            created_at=at(hour), updated_at=at(hour), due_at=at(hour),
            finished_at=at(hour) + timedelta(hours=healed_after_h),
        )  # fmt: skip
        RemediationStatusChange.objects.create(
            remediation=run, from_status="running", to_status="succeeded", actor="engine"
        )

    fault("gpu-01", 2, 79, healed_after_h=0.5)
    fault("gpu-01", 5, 48, healed_after_h=1, approved_by=admin_user)
    fault("gpu-02", 10, 79)


def tables(client):
    body = client.get("/api/v1/reports/failures/", RANGE).json()
    return body, {
        name: {row[name.removeprefix("by_")]: row for row in table["rows"]}
        for name, table in body["tables"].items()
    }


def test_mtbf_and_mttr_by_xid(manager_client, day):
    _, by = tables(manager_client)
    xid79, xid48 = by["by_xid"]["XID 79"], by["by_xid"]["XID 48"]
    # 16 GPUs x 24 h in service = 384 GPU-hours for every XID.
    assert (xid79["failures"], xid79["mtbf_h"], xid79["repaired"]) == (2, 192.0, 1)
    assert (xid79["mttr_min"], xid79["automatic_pct"]) == (30.0, 50.0)
    assert (xid48["failures"], xid48["mtbf_h"], xid48["mttr_min"]) == (1, 384.0, 60.0)
    assert xid48["automatic_pct"] == 0.0  # an admin approved it


def test_mtbf_and_mttr_by_gpu_model_and_node(manager_client, day):
    _, by = tables(manager_client)
    h100, a100 = by["by_model"]["H100"], by["by_model"]["A100"]
    assert (h100["failures"], h100["exposure_h"], h100["mtbf_h"], h100["mttr_min"]) == (
        2, 192.0, 96.0, 45.0,
    )  # fmt: skip
    assert (a100["failures"], a100["mtbf_h"], a100["repaired"], a100["mttr_min"]) == (
        1, 192.0, 0, None,
    )  # fmt: skip
    assert by["by_node"]["gpu-01"]["mtbf_h"] == 12.0
    assert by["by_node"]["gpu-02"]["mtbf_h"] == 24.0


def test_the_summary_gives_the_share_recovered_without_a_human(manager_client, day):
    body, _ = tables(manager_client)
    assert body["summary"]["failures"] == 3
    assert body["summary"]["gpu_mtbf_h"] == 128.0
    assert body["summary"]["mttr_min"] == 45.0
    assert body["summary"]["automatic_pct"] == 33.3


def test_a_person_in_a_runs_history_makes_it_a_human_recovery(manager_client, day, admin_user):
    from remediation.models import Remediation, RemediationStatusChange

    automatic = Remediation.objects.get(incident__xids=[79], approved_by=None)
    RemediationStatusChange.objects.create(
        remediation=automatic, from_status="needs_attention", to_status="running",
        actor=admin_user.get_username(),
    )  # fmt: skip
    body, _ = tables(manager_client)
    assert body["summary"]["automatic_pct"] == 0.0
