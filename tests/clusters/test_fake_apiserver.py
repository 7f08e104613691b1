"""The fake API server keeps the wire semantics the driver tests rely on.

These go through the official client directly, so a mistake in the fake shows up here rather
than as a driver test that passes for the wrong reason.
"""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

TAINT_A = {"key": "a", "value": "1", "effect": "NoSchedule"}
TAINT_B = {"key": "b", "value": "2", "effect": "NoExecute"}


@pytest.fixture
def core(server):
    cfg = client.Configuration(host=server.url)
    cfg.api_key = {"authorization": server.token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    return client.CoreV1Api(client.ApiClient(cfg))


def test_the_client_sends_an_object_patch_as_strategic_merge(server, core):
    server.add_node("gpu-01")

    core.patch_node("gpu-01", {"metadata": {"labels": {"x": "y"}}})

    (patch,) = server.requests_matching("PATCH")
    assert patch.content_type == "application/strategic-merge-patch+json"


def test_a_strategic_merge_patch_replaces_the_atomic_taint_list(server, core):
    server.add_node("gpu-01", taints=[TAINT_A])

    core.patch_node("gpu-01", {"spec": {"taints": [TAINT_B]}})

    assert server.node("gpu-01")["spec"]["taints"] == [TAINT_B]


def test_a_strategic_merge_patch_merges_conditions_by_type_and_deletes_null_keys(server, core):
    server.add_node("gpu-01", annotations={"keep": "1", "drop": "2"})
    patch = {
        "metadata": {"annotations": {"drop": None, "new": "3"}},
        "status": {"conditions": [{"type": "Ready", "status": "False"}]},
    }

    core.patch_node("gpu-01", patch)

    node = server.node("gpu-01")
    assert node["metadata"]["annotations"] == {"keep": "1", "new": "3"}
    statuses = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert statuses == {"MemoryPressure": "False", "Ready": "False"}


def test_a_list_body_is_sent_and_applied_as_a_json_patch(server, core):
    server.add_node("gpu-01", pool="spare")
    ops = [
        {"op": "test", "path": "/metadata/labels/medbay.io~1pool", "value": "spare"},
        {"op": "replace", "path": "/metadata/labels/medbay.io~1pool", "value": "training"},
        {"op": "add", "path": "/spec/taints", "value": [TAINT_A]},
    ]

    core.patch_node("gpu-01", ops)

    (patch,) = server.requests_matching("PATCH")
    assert patch.content_type == "application/json-patch+json"
    node = server.node("gpu-01")
    assert node["metadata"]["labels"]["medbay.io/pool"] == "training"
    assert node["spec"]["taints"] == [TAINT_A]


def test_a_merge_patch_replaces_lists_and_deletes_null_keys(server, core):
    server.add_node("gpu-01", taints=[TAINT_A, TAINT_B])
    body = {"spec": {"taints": [TAINT_B], "providerID": None}}

    core.patch_node("gpu-01", body, _content_type="application/merge-patch+json")

    spec = server.node("gpu-01")["spec"]
    assert spec["taints"] == [TAINT_B]
    assert "providerID" not in spec


def test_a_stale_resource_version_in_a_patch_is_a_conflict(server, core):
    node = server.add_node("gpu-01")
    core.patch_node("gpu-01", {"metadata": {"labels": {"x": "1"}}})
    stale = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]}}

    with pytest.raises(ApiException) as raised:
        core.patch_node("gpu-01", stale)

    assert raised.value.status == 409


def test_an_invalid_taint_value_is_rejected_as_the_real_server_would(server, core):
    server.add_node("gpu-01")
    bad = {"key": "medbay.io/gpu-fault", "value": "XID 79: fell off", "effect": "NoSchedule"}

    with pytest.raises(ApiException) as raised:
        core.patch_node("gpu-01", {"spec": {"taints": [bad]}})

    assert raised.value.status == 422
    assert server.node("gpu-01")["spec"].get("taints") is None


def test_lists_filter_by_label_and_field_selectors_and_omit_item_kinds(server, core):
    server.add_node("gpu-01", pool="training")
    server.add_node("spare-01", pool="spare")
    server.add_pod("trainer-0", "gpu-01")
    server.add_pod("other", "spare-01")

    nodes = core.list_node(label_selector="medbay.io/pool=spare")
    pods = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=gpu-01")

    assert [n.metadata.name for n in nodes.items] == ["spare-01"]
    assert [p.metadata.name for p in pods.items] == ["trainer-0"]
    raw = core.list_node(_preload_content=False).json()
    assert raw["kind"] == "NodeList"
    assert "kind" not in raw["items"][0]


def test_a_blocked_eviction_answers_429_with_a_status_body(server, core):
    server.add_pod("trainer-0", "gpu-01", pdb_blocks=1)
    eviction = client.V1Eviction(
        api_version="policy/v1",
        kind="Eviction",
        metadata=client.V1ObjectMeta(name="trainer-0", namespace="default"),
    )

    with pytest.raises(ApiException) as raised:
        core.create_namespaced_pod_eviction("trainer-0", "default", eviction)
    core.create_namespaced_pod_eviction("trainer-0", "default", eviction)

    assert raised.value.status == 429
    assert '"reason": "TooManyRequests"' in raised.value.body
    assert server.pod_names() == set()
