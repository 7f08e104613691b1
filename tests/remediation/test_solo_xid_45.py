"""XID 45 alone follows NVIDIA's solo guidance; right after another XID on the same GPU
it is folded into that XID's incident and not counted again."""

from __future__ import annotations

from datetime import timedelta

from health.models import Incident
from remediation import safety
from remediation.models import Remediation
from tests.remediation.conftest import ingest_xid


def test_xid_45_right_after_an_xid_79_on_the_same_gpu_joins_its_incident(
    big_sim, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        [first] = ingest_xid("gpu-04", 79, gpu=2).incident_ids
        [again] = ingest_xid("gpu-04", 45, gpu=2).incident_ids
    assert again == first
    assert Incident.objects.count() == 1
    assert sorted(Incident.objects.get().xids) == [45, 79]
    assert Remediation.objects.get().action == "replace"  # the 79's, nothing for the 45
    assert safety.fault_counts([Incident.objects.get().node_id]) == {
        Incident.objects.get().node_id: 1
    }


def test_a_storm_of_solo_xid_45s_only_notifies_and_never_counts_as_flapping(
    big_sim, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        for minutes in range(0, 180, 6):  # every 6 min for 3 h: a new burst each time
            ingest_xid("gpu-05", 45, gpu=1, ago=timedelta(minutes=180 - minutes))
    assert Incident.objects.count() == 30
    assert set(Remediation.objects.values_list("action", flat=True)) <= {"notify"}
    assert safety.fault_counts(Incident.objects.values_list("node_id", flat=True)) == {}
    assert not Remediation.objects.filter(planned_steps=["quarantine"]).exists()


def test_the_catalogue_page_says_which_rule_applies_to_xid_45_and_what_79_does(client, admin_user):
    client.force_login(admin_user)
    page = client.get("/health/xid/45/").content.decode()
    assert "Alone (solo), XID 45 can mean Fabric Manager died: notify." in page
    assert "folded into that XID&#x27;s incident" in page
    page = client.get("/health/xid/79/").content.decode()
    assert "Replace, automatically, unless a policy says otherwise" in page
    assert "under one switch, rack or power feed" in page
    page = client.get("/health/xid/13/").content.decode()
    assert "the job&#x27;s own fault" in page


def test_the_xid_79_page_does_not_contradict_the_replace_the_engine_does(client, admin_user):
    from remediation.deciding import default_for_xid

    client.force_login(admin_user)
    page = client.get("/health/xid/79/").content.decode()

    assert default_for_xid(79) == ("replace", "automatic")
    assert "Replace, automatically, unless a policy says otherwise" in page
    assert "NVIDIA&#x27;s guidance, which Medbay&#x27;s default does not follow" in page


def test_the_xid_page_shows_the_policy_the_engine_follows_instead_of_the_default(
    client, admin_user
):
    from remediation.models import Policy

    Policy.objects.create(xid=79, action="reboot", mode="approval")
    client.force_login(admin_user)

    page = client.get("/health/xid/79/").content.decode()

    assert '<dd id="xid-policy">Reboot, after an admin&#x27;s approval.</dd>' in page
