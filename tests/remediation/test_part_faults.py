"""A shared part's fault is the part's: the same hardware fault on many nodes under one
leaf switch (Slurm's topology.conf) drains them, holds their replaces for an admin, and
counts once toward the breaker."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from health.models import FaultGroup, FaultGroupKind, Incident
from remediation import admission
from remediation.models import Action, BreakerRefusal, Remediation
from tests.remediation.conftest import ingest_xid

LEAF = [f"gpu-{n:02d}" for n in range(1, 17)]


@pytest.fixture
def topology(tmp_path, settings):
    conf = tmp_path / "topology.conf"
    conf.write_text(
        "SwitchName=leaf1 Nodes=gpu-[01-16]\nSwitchName=leaf2 Nodes=gpu-[17-20]\n"
        "SwitchName=spine Switches=leaf[1-2]\n"
    )
    settings.MEDBAY_TOPOLOGY_FILES = [str(conf)]
    settings.MEDBAY_PART_FAULT_WINDOW_S = 30
    return conf


def test_a_leaf_switch_failure_drains_its_sixteen_nodes_and_holds_their_replaces(
    big_sim, topology, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        for name in LEAF:
            ingest_xid(name, 79, gpu=0)
        admission.decide_due()  # the engine's sweep picks up those held meanwhile

    group = FaultGroup.objects.get()
    assert (group.kind, group.part, group.admitted) == (FaultGroupKind.PART, "switch leaf1", True)
    assert group.summary.startswith("XID 79 on 16 nodes under switch leaf1 within")
    assert not Incident.objects.filter(decision_due=True).exists()
    runs = Remediation.objects.all()
    assert {run.action for run in runs} == {Action.DRAIN}  # no replace took a spare
    assert sorted(run.node.name for run in runs) == LEAF
    assert not BreakerRefusal.objects.exists()  # the part counted once, not sixteen times
    drained = {info.name for info in big_sim.nodes() if "drain" in info.flags}
    assert drained == set()  # the engine has not run yet: only the runs exist

    # An unrelated fault under the other switch is still the node's own, and admitted:
    # the part counts as one node toward the partition's limit of two.
    with django_capture_on_commit_callbacks(execute=True):
        [lone] = ingest_xid("gpu-18", 79, gpu=2).incident_ids
    Incident.objects.filter(pk=lone).update(
        opened_at=timezone.now() - timedelta(seconds=31), decide_after=timezone.now()
    )
    admission.decide_due()
    assert Remediation.objects.get(incident_id=lone).action == Action.REPLACE


def test_one_node_under_a_switch_is_held_for_the_window_then_decided_as_its_own(
    big_sim, topology, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        [incident] = ingest_xid("gpu-03", 79, gpu=1).incident_ids
    assert not Remediation.objects.exists()
    held = Incident.objects.get(pk=incident)
    assert held.decision_due and held.decide_after > timezone.now()
    Incident.objects.filter(pk=incident).update(
        opened_at=timezone.now() - timedelta(seconds=31), decide_after=timezone.now()
    )
    admission.decide_due()
    assert Remediation.objects.get().action == Action.REPLACE
    assert not FaultGroup.objects.exists()


def test_without_a_topology_a_hardware_fault_is_decided_at_once(
    big_sim, settings, django_capture_on_commit_callbacks
):
    settings.MEDBAY_TOPOLOGY_FILES = []
    with django_capture_on_commit_callbacks(execute=True):
        ingest_xid("gpu-03", 79, gpu=1)
    assert Remediation.objects.get().action == Action.REPLACE


def test_the_parts_page_shows_its_nodes_events_and_runs_and_an_admin_decides_on_it(
    big_sim, topology, client, admin_user, researcher, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        for name in LEAF[:4]:
            ingest_xid(name, 79, gpu=0)
        admission.decide_due()
    group = FaultGroup.objects.get()

    client.force_login(researcher)
    page = client.get(f"/faults/{group.pk}/").content.decode()
    assert "Suspected switch leaf1" in page and "gpu-04" in page
    assert "Replace the nodes" not in page  # only admins decide
    assert client.post(f"/faults/{group.pk}/decide/replace/").status_code == 403

    client.force_login(admin_user)
    page = client.get(f"/faults/{group.pk}/").content.decode()
    assert "Replace the nodes" in page and "counted as one node" in page
    assert page.count("Drain") >= 4
    # The drains have not ended yet: each node says so, and nothing else is started.
    answer = client.post(f"/faults/{group.pk}/decide/replace/", follow=True)
    assert "already has an active remediation" in answer.content.decode()
    assert Remediation.objects.filter(action=Action.REPLACE).count() == 0
    assert client.post(f"/faults/{group.pk}/decide/explode/").status_code == 404


def test_an_admin_groups_incidents_by_hand_and_bad_input_gets_a_clear_answer(
    big_sim, client, admin_user, settings, django_capture_on_commit_callbacks
):
    settings.MEDBAY_TOPOLOGY_FILES = []
    with django_capture_on_commit_callbacks(execute=True):
        first = ingest_xid("gpu-05", 74, gpu=1).incident_ids[0]
        second = ingest_xid("gpu-06", 74, gpu=1).incident_ids[0]
    client.force_login(admin_user)
    answer = client.post("/faults/group/", {"incidents": f"{first}, {second}", "note": "one cable"})
    group = FaultGroup.objects.get()
    assert answer.status_code == 302 and answer["Location"] == f"/faults/{group.pk}/"
    assert group.kind == FaultGroupKind.MANUAL
    assert group.rule == "grouped by hand by admin: one cable"
    assert set(group.incidents.values_list("pk", flat=True)) == {first, second}
    page = client.get(f"/faults/{group.pk}/").content.decode()
    assert "2 incidents on 2 nodes, grouped by hand by admin: one cable" in page

    for bad, words in [
        ("", "Name the incidents to group"),
        ("12; DROP", "Incidents are named by number"),
        ("999999", "No incident 999999."),
        (str(first), "Name two or more incidents"),
    ]:
        answer = client.post("/faults/group/", {"incidents": bad}, follow=True)
        assert answer.status_code == 200
        assert words in answer.content.decode()
    assert FaultGroup.objects.count() == 1
