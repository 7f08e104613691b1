"""The agent ingestion endpoint: token binding, validation, idempotency, folding."""

from datetime import timedelta

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from clusters.models import Gpu, GpuHealth, Node
from health.models import HealthEvent, Incident, NodeToken, hash_token

URL = "/api/v1/health/events/"


@pytest.fixture
def tokens(synced):
    return {name: NodeToken.issue(Node.objects.get(name=name))[1] for name in ("gpu-01", "gpu-02")}


def agent(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def xid_event(event_id="e1", code=79, pci="0000:5d:00", at=None, message=None):
    return {
        "id": event_id,
        "kind": "xid",
        "observed_at": (at or timezone.now()).isoformat(),
        "xid": code,
        "pci": pci,
        "message": message or "GPU has fallen off the bus.",
    }


def post(client, node, events):
    return client.post(URL, {"node": node, "events": events}, format="json")


def test_an_xid_79_turns_its_gpu_red_and_is_stored_once(tokens):
    response = post(agent(tokens["gpu-02"]), "gpu-02", [xid_event()])
    assert response.status_code == 201
    assert response.json()["accepted"] == 1
    gpu = Gpu.objects.get(node__name="gpu-02", index=3)  # 0000:5d:00 is the 4th HGX slot
    assert gpu.health == GpuHealth.FAILED
    assert gpu.health_reason.startswith("XID 79")
    event = HealthEvent.objects.get()
    assert (event.xid, event.gpu_index, event.severity) == (79, 3, "critical")


def test_a_token_cannot_report_for_another_node(tokens):
    response = post(agent(tokens["gpu-01"]), "gpu-02", [xid_event()])
    assert response.status_code == 403
    assert "gpu-01" in response.json()["detail"]
    assert not HealthEvent.objects.exists()


def test_tokens_are_stored_hashed_and_rotation_revokes_the_old_one(tokens):
    node = Node.objects.get(name="gpu-01")
    stored = NodeToken.objects.get(node=node, revoked_at__isnull=True)
    assert stored.token_hash == hash_token(tokens["gpu-01"])
    assert tokens["gpu-01"] not in str(NodeToken.objects.values_list())
    NodeToken.issue(node)
    assert post(agent(tokens["gpu-01"]), "gpu-01", [xid_event()]).status_code == 401


def test_missing_or_wrong_tokens_are_401(synced):
    assert APIClient().post(URL, {}, format="json").status_code == 401
    assert post(agent("mbn_nope"), "gpu-01", [xid_event()]).status_code == 401


def test_a_user_session_cannot_post_events(client, researcher, synced):
    client.force_login(researcher)
    response = client.post(URL, {"node": "gpu-01", "events": []}, content_type="application/json")
    assert response.status_code in (401, 403)


def test_resending_a_batch_counts_nothing_twice(tokens):
    client = agent(tokens["gpu-02"])
    events = [xid_event("a"), xid_event("b", code=13, message="Graphics SM Warp Exception")]
    assert post(client, "gpu-02", events).json()["accepted"] == 2
    again = post(client, "gpu-02", events).json()
    assert (again["accepted"], again["duplicates"]) == (0, 2)
    assert HealthEvent.objects.count() == 2
    assert sum(HealthEvent.objects.values_list("count", flat=True)) == 2


def test_ids_an_array_literal_could_misread_are_each_claimed_once(tokens):
    # On PostgreSQL a batch's ids travel as one text[] parameter, where an unquoted NULL
    # would be no id at all; ids allow letters, digits, '.', '_', ':' and '-' only.
    ids = ["NULL", "null", "a.b", "c:d", "-e-", "1", "01", "x" * 128]
    events = [xid_event(event_id, code=13, message=f"m{n}") for n, event_id in enumerate(ids)]
    client = agent(tokens["gpu-01"])
    assert post(client, "gpu-01", events).json()["accepted"] == len(ids)
    again = post(client, "gpu-01", events).json()
    assert (again["accepted"], again["duplicates"]) == (0, len(ids))
    assert HealthEvent.objects.count() == len(ids)


def test_identical_repeats_fold_into_one_event_with_a_count(tokens):
    now = timezone.now()
    storm = [
        xid_event(f"s{i}", code=95, message="Uncontained: FBHUB. RST: Yes, D-RST: No",
                  at=now - timedelta(seconds=300 - i))
        for i in range(200)
    ]  # fmt: skip
    response = post(agent(tokens["gpu-02"]), "gpu-02", storm)
    assert response.json()["folded"] == 199
    event = HealthEvent.objects.get()
    assert event.count == 200
    more = [xid_event("s200", code=95, message="Uncontained: FBHUB. RST: Yes, D-RST: No")]
    post(agent(tokens["gpu-02"]), "gpu-02", more)
    assert HealthEvent.objects.get().count == 201


def test_a_burst_of_13_and_43_from_one_app_is_one_incident(tokens):
    now = timezone.now()
    burst = [
        xid_event("x1", code=13, at=now - timedelta(seconds=30), message="SM (GPC 1, TPC 0)"),
        xid_event("x2", code=13, at=now - timedelta(seconds=29), message="SM (GPC 2, TPC 1)"),
        xid_event("x3", code=43, at=now - timedelta(seconds=28), message="Ch 00000008"),
    ]
    post(agent(tokens["gpu-02"]), "gpu-02", burst)
    incident = Incident.objects.get()
    assert sorted(incident.xids) == [13, 43]
    assert incident.event_count == 3
    assert Gpu.objects.get(node__name="gpu-02", index=3).health != GpuHealth.FAILED


def test_unknown_xids_are_kept_and_named(tokens):
    post(agent(tokens["gpu-02"]), "gpu-02", [xid_event(code=4242, message="new code")])
    assert HealthEvent.objects.get().title == "unknown XID 4242"


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"node": "gpu-02"}, "events"),
        ({"node": "gpu-02", "events": [{"id": "a", "kind": "xid"}]}, "events[0].observed_at"),
        ({"node": "gpu-02", "events": [{**xid_event(), "xid": "79"}]}, "events[0].xid"),
        ({"node": "gpu-02", "events": [{**xid_event(), "pci": "3b:00.0"}]}, "events[0].pci"),
        ({"node": "gpu-02", "events": [{**xid_event(), "kind": "smoke"}]}, "events[0].kind"),
        (
            {"node": "gpu-02", "events": [xid_event(at=timezone.now() + timedelta(hours=2))]},
            "events[0].observed_at",
        ),
        ({"node": "gpu-02", "events": [xid_event("d"), xid_event("d")]}, "events[1].id"),
        ({"node": "gpu-02", "events": [xid_event(str(i)) for i in range(1001)]}, "events"),
    ],
)
def test_bad_batches_get_per_field_errors_and_nothing_is_stored(tokens, payload, field):
    response = agent(tokens["gpu-02"]).post(URL, payload, format="json")
    assert response.status_code == 400
    assert field in response.json()["errors"]
    assert not HealthEvent.objects.exists()


def test_an_unknown_node_gets_the_same_403_as_another_node(tokens):
    unknown = post(agent(tokens["gpu-02"]), "gpu-99", [xid_event()])
    another = post(agent(tokens["gpu-02"]), "gpu-01", [xid_event()])

    assert unknown.status_code == another.status_code == 403
    assert unknown.json()["detail"].replace("gpu-99", "X") == another.json()["detail"].replace(
        "gpu-01", "X"
    )


def test_an_oversize_payload_is_refused_with_413(tokens):
    huge = [xid_event(str(i), message="x" * 3000) for i in range(900)]
    response = post(agent(tokens["gpu-02"]), "gpu-02", huge)
    assert response.status_code == 413


def test_the_event_feed_api_filters_by_node_and_code(tokens, researcher):
    post(agent(tokens["gpu-02"]), "gpu-02", [xid_event("a"), xid_event("b", code=48)])
    client = APIClient()
    client.force_authenticate(researcher)
    body = client.get(URL, {"xid": 48}).json()
    assert [e["xid"] for e in body["results"]] == [48]
    assert client.get(URL, {"node": "gpu-01"}).json()["count"] == 0


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
event_like = st.fixed_dictionaries(
    {},
    optional={
        "id": json_values | st.text(max_size=30),
        "kind": st.sampled_from(["xid", "check", "nvml", "x"]) | json_values,
        "observed_at": st.datetimes().map(lambda d: d.isoformat()) | json_values,
        "xid": st.integers(-5, 200_000) | json_values,
        "pci": st.text(max_size=12) | json_values,
        "gpu_index": json_values,
        "check": json_values,
        "status": st.sampled_from(["pass", "warn", "fail", "bad"]) | json_values,
        "message": json_values,
        "data": json_values,
    },
)
payloads = json_values | st.fixed_dictionaries(
    {}, optional={"node": st.sampled_from(["gpu-02", "gpu-01", ""]) | json_values,
                  "events": st.lists(event_like, max_size=5) | json_values}
)  # fmt: skip


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(payload=payloads)
def test_random_json_never_causes_a_server_error(tokens, payload):
    response = agent(tokens["gpu-02"]).post(URL, payload, format="json")
    assert response.status_code in (201, 400, 403), response.content
    body = response.json()
    assert "detail" in body or "accepted" in body
