"""The Kubernetes fleet driver, end to end through the official client and a wire-format server."""

from __future__ import annotations

import socket

import pytest

from clusters.backends.base import BackendError, FleetProvider
from clusters.backends.kubernetes import KubernetesFleet
from tests.clusters.fake_apiserver import ALWAYS

FAULT = "medbay.io/gpu-fault"
OTHER_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def fault_taints(node: dict) -> list[dict]:
    return [t for t in node["spec"].get("taints", []) if t["key"] == FAULT]


def test_it_is_a_fleet_provider_named_kubernetes(fleet):
    assert isinstance(fleet, FleetProvider)
    assert fleet.name == "kubernetes"


# -- cordon / uncordon -------------------------------------------------------------------------


def test_cordon_marks_the_node_unschedulable_with_a_fault_taint_and_the_reason(server, fleet):
    server.add_node("gpu-01")

    fleet.cordon("gpu-01", "xid-79")

    node = server.node("gpu-01")
    assert node["spec"]["unschedulable"] is True
    assert fault_taints(node) == [{"key": FAULT, "value": "xid-79", "effect": "NoSchedule"}]
    assert node["metadata"]["annotations"]["medbay.io/reason"] == "xid-79"


def test_cordon_sends_a_strategic_merge_patch_conditional_on_the_resource_version(server, fleet):
    before = server.add_node("gpu-01")

    fleet.cordon("gpu-01", "xid-79")

    (patch,) = server.requests_matching("PATCH", "/api/v1/nodes/gpu-01")
    assert patch.content_type == "application/strategic-merge-patch+json"
    assert patch.authorization == f"Bearer {server.token}"
    assert patch.body["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_cordoning_twice_keeps_one_taint_and_writes_nothing_the_second_time(server, fleet):
    server.add_node("gpu-01")

    fleet.cordon("gpu-01", "xid-79")
    fleet.cordon("gpu-01", "xid-79")

    assert len(fault_taints(server.node("gpu-01"))) == 1
    assert len(server.requests_matching("PATCH")) == 1


def test_cordoning_again_with_a_new_reason_updates_the_taint_instead_of_adding_one(server, fleet):
    server.add_node("gpu-01")

    fleet.cordon("gpu-01", "xid-79")
    fleet.cordon("gpu-01", "xid-48 double bit ECC")

    node = server.node("gpu-01")
    assert [t["value"] for t in fault_taints(node)] == ["xid-48-double-bit-ECC"]
    assert node["metadata"]["annotations"]["medbay.io/reason"] == "xid-48 double bit ECC"


def test_cordon_keeps_taints_that_other_controllers_own(server, fleet):
    server.add_node("gpu-01", taints=[OTHER_TAINT])

    fleet.cordon("gpu-01", "xid-79")

    assert OTHER_TAINT in server.node("gpu-01")["spec"]["taints"]


def test_cordon_turns_a_long_free_text_reason_into_a_valid_taint_value(server, fleet):
    server.add_node("gpu-01")
    reason = "XID 79: GPU has fallen off the bus (PCI 0000:3b:00.0) — node needs a reseat! " * 2

    fleet.cordon("gpu-01", reason)

    node = server.node("gpu-01")
    (taint,) = fault_taints(node)
    assert taint["value"].startswith("XID-79-GPU-has-fallen-off-the-bus")
    assert len(taint["value"]) <= 63
    assert node["metadata"]["annotations"]["medbay.io/reason"] == reason


def test_cordon_rereads_and_retries_when_someone_else_changed_the_node(server, fleet):
    server.add_node("gpu-01")
    server.fail_next(409, method="PATCH")

    fleet.cordon("gpu-01", "xid-79")

    assert len(server.requests_matching("PATCH")) == 2
    assert server.node("gpu-01")["spec"]["unschedulable"] is True


def test_uncordon_clears_unschedulable_the_fault_taint_and_the_reason(server, fleet):
    server.add_node("gpu-01", taints=[OTHER_TAINT])
    fleet.cordon("gpu-01", "xid-79")

    fleet.uncordon("gpu-01")

    node = server.node("gpu-01")
    assert node["spec"]["unschedulable"] is False
    assert node["spec"]["taints"] == [OTHER_TAINT]
    assert "medbay.io/reason" not in node["metadata"].get("annotations", {})


def test_uncordon_removes_the_taint_list_when_the_fault_taint_was_the_only_one(server, fleet):
    server.add_node("gpu-01")
    fleet.cordon("gpu-01", "xid-79")

    fleet.uncordon("gpu-01")

    assert "taints" not in server.node("gpu-01")["spec"]


def test_uncordoning_a_healthy_node_writes_nothing(server, fleet):
    server.add_node("gpu-01")

    fleet.uncordon("gpu-01")

    assert server.requests_matching("PATCH") == []


# -- evict ---------------------------------------------------------------------------------------


def test_evict_posts_a_policy_v1_eviction_for_each_workload_pod(server, fleet):
    server.add_node("gpu-01")
    server.add_pod("trainer-0", "gpu-01", namespace="ml")
    server.add_pod("elsewhere", "gpu-02")

    fleet.evict("gpu-01", timeout_s=5)

    (post,) = server.requests_matching("POST")
    assert post.path == "/api/v1/namespaces/ml/pods/trainer-0/eviction"
    assert post.body["apiVersion"] == "policy/v1"
    assert post.body["kind"] == "Eviction"
    assert server.pod_names() == {"elsewhere"}
    (listing,) = server.requests_matching("GET", "/api/v1/pods")[:1]
    assert listing.query["fieldSelector"] == "spec.nodeName=gpu-01"


def test_evict_skips_daemonset_pods_and_mirror_pods(server, fleet):
    server.add_node("gpu-01")
    server.add_pod("trainer-0", "gpu-01")
    server.add_pod("dcgm-exporter-x2v9", "gpu-01", owner_kind="DaemonSet")
    server.add_pod("kube-proxy-gpu-01", "gpu-01", mirror=True)

    fleet.evict("gpu-01", timeout_s=5)

    evicted = [r.path.split("/")[-2] for r in server.requests_matching("POST")]
    assert evicted == ["trainer-0"]
    assert server.pod_names() == {"dcgm-exporter-x2v9", "kube-proxy-gpu-01"}


def test_evict_retries_a_disruption_budget_refusal_until_the_budget_allows(server, fleet):
    server.add_node("gpu-01")
    server.add_pod("trainer-0", "gpu-01", pdb_blocks=2)

    fleet.evict("gpu-01", timeout_s=5)

    assert len(server.requests_matching("POST")) == 3
    assert server.pod_names() == set()


def test_evict_times_out_as_a_temporary_error_naming_the_pods_still_blocked(server, fleet):
    server.add_node("gpu-01")
    server.add_pod("trainer-0", "gpu-01", namespace="ml", pdb_blocks=ALWAYS)
    server.add_pod("trainer-1", "gpu-01", namespace="ml")

    with pytest.raises(BackendError) as raised:
        fleet.evict("gpu-01", timeout_s=0.2)

    assert raised.value.permanent is False
    assert "ml/trainer-0" in raised.value.message
    assert "trainer-1" not in raised.value.message
    assert server.pod_names() == {"trainer-0"}


def test_evict_counts_a_pod_that_vanished_before_its_eviction_as_evicted(server, fleet):
    server.add_node("gpu-01")
    server.add_pod("trainer-0", "gpu-01", vanish_on_eviction=True)

    fleet.evict("gpu-01", timeout_s=5)

    assert len(server.requests_matching("POST")) == 1
    assert server.pod_names() == set()


def test_evict_waits_until_evicted_pods_have_finished_terminating(server, fleet):
    server.add_node("gpu-01")
    server.add_pod("trainer-0", "gpu-01", linger_lists=3)

    fleet.evict("gpu-01", timeout_s=5)

    assert server.pod_names() == set()
    assert len(server.requests_matching("GET", "/api/v1/pods")) >= 4


def test_evict_gives_up_on_pods_that_never_finish_terminating(server, fleet):
    server.add_node("gpu-01")
    server.add_pod("trainer-0", "gpu-01", linger_lists=10_000)

    with pytest.raises(BackendError) as raised:
        fleet.evict("gpu-01", timeout_s=0.2)

    assert raised.value.permanent is False
    assert "still terminating" in raised.value.message


# -- pools and spares ------------------------------------------------------------------------------


def test_move_to_pool_labels_the_node(server, fleet):
    server.add_node("gpu-01", pool="training")

    fleet.move_to_pool("gpu-01", "inference")

    assert server.node("gpu-01")["metadata"]["labels"]["medbay.io/pool"] == "inference"
    (patch,) = server.requests_matching("PATCH")
    assert patch.body == {"metadata": {"labels": {"medbay.io/pool": "inference"}}}


def test_move_to_pool_refuses_an_unknown_pool_without_calling_the_api(server, fleet):
    server.add_node("gpu-01")

    with pytest.raises(BackendError) as raised:
        fleet.move_to_pool("gpu-01", "gaming")

    assert raised.value.permanent is True
    assert server.requests == []


def test_spare_capacity_lists_only_ready_schedulable_spares(server, fleet):
    server.add_node("gpu-01", pool="training")
    server.add_node("spare-b", pool="spare")
    server.add_node("spare-a", pool="spare")
    server.add_node("spare-not-ready", pool="spare", ready=False)
    server.add_node("spare-cordoned", pool="spare", unschedulable=True)

    assert fleet.spare_capacity() == ["spare-a", "spare-b"]
    (listing,) = server.requests_matching("GET", "/api/v1/nodes")
    assert listing.query["labelSelector"] == "medbay.io/pool=spare"


def test_replace_deletes_the_node_and_brings_a_spare_into_its_pool(server, fleet):
    server.add_node("gpu-01", pool="inference")
    server.add_node("spare-01", pool="spare")
    fleet.cordon("gpu-01", "xid-79")

    replacement = fleet.replace("gpu-01", "xid-79")

    assert replacement == "spare-01"
    assert "gpu-01" not in server.nodes
    spare = server.node("spare-01")
    assert spare["metadata"]["labels"]["medbay.io/pool"] == "inference"
    assert not spare["spec"].get("unschedulable")
    assert fault_taints(spare) == []
    assert spare["metadata"]["annotations"]["medbay.io/replaces"] == "gpu-01"
    assert server.requests_matching("DELETE") != []


def test_replace_never_picks_a_spare_that_is_not_ready_or_is_cordoned(server, fleet):
    server.add_node("gpu-01")
    server.add_node("spare-a", pool="spare", ready=False)
    server.add_node("spare-b", pool="spare", unschedulable=True)
    server.add_node("spare-c", pool="spare")

    assert fleet.replace("gpu-01", "xid-79") == "spare-c"


def test_replace_brings_in_the_first_free_spare_of_those_medbay_chose(server, fleet):
    server.add_node("gpu-01")
    server.add_node("spare-a", pool="spare")
    server.add_node("spare-b", pool="spare", unschedulable=True)
    server.add_node("spare-c", pool="spare")

    assert fleet.replace("gpu-01", "xid-79", spares=["spare-b", "spare-c"]) == "spare-c"
    assert fleet.spare_capacity() == ["spare-a"]


def test_replace_without_a_free_spare_is_permanent_and_keeps_the_failed_node(server, fleet):
    server.add_node("gpu-01")
    server.add_node("spare-a", pool="spare", ready=False)

    with pytest.raises(BackendError) as raised:
        fleet.replace("gpu-01", "xid-79")

    assert raised.value.permanent is True
    assert "no spare capacity" in raised.value.message
    assert "gpu-01" in server.nodes


def test_replace_picks_another_spare_when_a_racing_engine_claims_the_first(server, fleet):
    server.add_node("gpu-01")
    server.add_node("spare-a", pool="spare")
    server.add_node("spare-b", pool="spare")
    # The racing engine's claim lands between our list and our patch of spare-a.
    server.fail_next(409, method="PATCH", path="/api/v1/nodes/spare-a")

    assert fleet.replace("gpu-01", "xid-79") in {"spare-a", "spare-b"}
    assert len(server.requests_matching("PATCH")) == 2


def test_replace_after_a_crash_reuses_the_spare_it_already_claimed(server, fleet):
    server.add_node("gpu-01")
    server.add_node("spare-a", pool="spare")
    server.add_node("spare-b", pool="spare")
    server.fail_next(503, method="DELETE")
    with pytest.raises(BackendError):
        fleet.replace("gpu-01", "xid-79")

    assert fleet.replace("gpu-01", "xid-79") == "spare-a"
    assert "gpu-01" not in server.nodes
    assert fleet.spare_capacity() == ["spare-b"]


def test_replace_calls_the_pluggable_provisioner_instead_of_using_spares(server, make_fleet):
    server.add_node("gpu-01")
    server.add_node("spare-a", pool="spare")
    calls = []

    def provision(node: str, reason: str) -> str:
        calls.append((node, reason))
        return "cloud-gpu-7"

    replacement = make_fleet(provisioner=provision).replace("gpu-01", "xid-79")

    assert replacement == "cloud-gpu-7"
    assert calls == [("gpu-01", "xid-79")]
    assert "gpu-01" not in server.nodes
    assert server.node("spare-a")["metadata"]["labels"]["medbay.io/pool"] == "spare"


# -- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "action",
    [
        lambda f: f.cordon("gpu-404", "xid-79"),
        lambda f: f.uncordon("gpu-404"),
        lambda f: f.move_to_pool("gpu-404", "spare"),
        lambda f: f.replace("gpu-404", "xid-79"),
    ],
    ids=["cordon", "uncordon", "move_to_pool", "replace"],
)
def test_an_unknown_node_is_a_permanent_error_that_names_it(server, fleet, action):
    server.add_node("spare-a", pool="spare")

    with pytest.raises(BackendError) as raised:
        action(fleet)

    assert raised.value.permanent is True
    assert "gpu-404 not found" in raised.value.message
    assert fleet.spare_capacity() == ["spare-a"]


@pytest.mark.parametrize("code", [500, 503])
def test_a_server_error_is_temporary(server, fleet, code):
    server.add_node("gpu-01")
    server.fail_next(code)

    with pytest.raises(BackendError) as raised:
        fleet.cordon("gpu-01", "xid-79")

    assert raised.value.permanent is False


def test_a_server_error_during_eviction_is_temporary(server, fleet):
    server.add_node("gpu-01")
    server.add_pod("trainer-0", "gpu-01")
    server.fail_next(500, method="POST")

    with pytest.raises(BackendError) as raised:
        fleet.evict("gpu-01", timeout_s=1)

    assert raised.value.permanent is False


def test_a_forbidden_request_is_permanent(server, fleet):
    server.add_node("gpu-01")
    server.fail_next(403, method="PATCH")

    with pytest.raises(BackendError) as raised:
        fleet.move_to_pool("gpu-01", "spare")

    assert raised.value.permanent is True
    assert "forbidden" in raised.value.message


def test_a_wrong_token_is_permanent(server):
    server.add_node("gpu-01")
    fleet = KubernetesFleet(host=server.url, token="not-the-token")

    with pytest.raises(BackendError) as raised:
        fleet.spare_capacity()

    assert raised.value.permanent is True


def test_an_unreachable_api_server_is_temporary():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    fleet = KubernetesFleet(host=f"http://127.0.0.1:{port}", token="t", request_timeout_s=2)

    with pytest.raises(BackendError) as raised:
        fleet.cordon("gpu-01", "xid-79")

    assert raised.value.permanent is False


def test_missing_kubernetes_credentials_are_reported_on_first_use_not_at_construction(
    monkeypatch, tmp_path
):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    fleet = KubernetesFleet()

    with pytest.raises(BackendError) as raised:
        fleet.spare_capacity()

    assert raised.value.permanent is True


def test_from_env_uses_an_explicit_host_and_token(server):
    server.add_node("spare-a", pool="spare")
    env = {"MEDBAY_K8S_HOST": server.url, "MEDBAY_K8S_TOKEN": server.token}

    assert KubernetesFleet.from_env(env).spare_capacity() == ["spare-a"]


def test_a_kubeconfig_file_is_honoured(server, tmp_path):
    server.add_node("spare-a", pool="spare")
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        f"""
apiVersion: v1
kind: Config
clusters: [{{name: fake, cluster: {{server: "{server.url}"}}}}]
users: [{{name: medbay, user: {{token: {server.token}}}}}]
contexts: [{{name: fake, context: {{cluster: fake, user: medbay}}}}]
current-context: fake
"""
    )

    assert KubernetesFleet(kubeconfig=str(kubeconfig)).spare_capacity() == ["spare-a"]


# -- ownership: Medbay's uncordon removes only its own -------------------------------------------


def test_uncordon_keeps_a_cordon_another_controller_set_before_medbay(server, fleet):
    server.add_node("gpu-01", unschedulable=True, taints=[OTHER_TAINT])
    fleet.cordon("gpu-01", "xid-79")

    fleet.uncordon("gpu-01")

    node = server.node("gpu-01")
    assert node["spec"]["unschedulable"] is True
    assert node["spec"]["taints"] == [OTHER_TAINT]
    assert "medbay.io/cordoned-by-others" not in node["metadata"].get("annotations", {})


def test_uncordon_never_touches_a_node_only_someone_else_cordoned(server, fleet):
    server.add_node("gpu-01", unschedulable=True)

    fleet.uncordon("gpu-01")

    assert server.node("gpu-01")["spec"]["unschedulable"] is True
    assert server.requests_matching("PATCH") == []


def test_holders_name_other_controllers_cordons_and_taints(server, fleet):
    server.add_node("gpu-01", unschedulable=True, taints=[OTHER_TAINT])
    assert fleet.holders("gpu-01") == [
        "cordoned by another controller",
        "taint nvidia.com/gpu=present:NoSchedule",
    ]
    server.add_node("gpu-02")
    fleet.cordon("gpu-02", "xid-79")
    assert fleet.holders("gpu-02") == []
