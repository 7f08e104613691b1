"""Fleet provider for GPU nodes that are also Kubernetes nodes.

Talks to the API server with the official `kubernetes` client. Node writes are
read-modify-patch with the node's `resourceVersion` in the patch, which makes the API server
refuse the write (409) if someone else changed the node in between; the driver then re-reads
and tries again. That matters because `spec.taints` is an atomic list: a strategic-merge
patch replaces it whole, so a blind write could drop a taint another controller just added.

Imports no Django, so the engine, the agent and tests can use it alone.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from clusters.backends.base import BackendError, pick_spare
from clusters.backends.capabilities import (
    InferenceDemand,
    ReportsFleetHolders,
    ReportsInferenceDemand,
)

POOL_LABEL = "medbay.io/pool"
REASON_ANNOTATION = "medbay.io/reason"
REPLACES_ANNOTATION = "medbay.io/replaces"
CORDONED_BY_OTHERS_ANNOTATION = "medbay.io/cordoned-by-others"
REPLACES_UID_ANNOTATION = "medbay.io/replaces-uid"
FAULT_TAINT = "medbay.io/gpu-fault"
POOLS = ("training", "inference", "spare")
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"

CONFLICT_ATTEMPTS = 5
_TAINT_VALUE_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")

Provisioner = Callable[[str, str], str]


class KubernetesFleet(ReportsFleetHolders, ReportsInferenceDemand):
    """Cordons, drains, relabels and replaces Kubernetes nodes, sees other controllers'
    taints and cordons on them, and reads the inference workload's demand."""

    name = "kubernetes"

    def __init__(
        self,
        *,
        host: str | None = None,
        token: str | None = None,
        kubeconfig: str | None = None,
        context: str | None = None,
        ca_cert: str | None = None,
        verify_ssl: bool = True,
        provisioner: Provisioner | None = None,
        api: client.CoreV1Api | None = None,
        request_timeout_s: float = 30,
        backoff_s: float = 1.0,
        max_backoff_s: float = 15.0,
        poll_interval_s: float = 2.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._host, self._token, self._ca_cert = host, token, ca_cert
        self._kubeconfig, self._context, self._verify_ssl = kubeconfig, context, verify_ssl
        self._api = api
        self._provisioner = provisioner
        self._timeout = request_timeout_s
        self._backoff_s, self._max_backoff_s = backoff_s, max_backoff_s
        self._poll_interval_s = poll_interval_s
        self._sleep, self._clock = sleep, clock

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **kwargs: Any) -> KubernetesFleet:
        """MEDBAY_K8S_HOST + MEDBAY_K8S_TOKEN (+ MEDBAY_K8S_CA_FILE), else kubeconfig/in-cluster."""
        env = os.environ if environ is None else environ
        return cls(
            host=env.get("MEDBAY_K8S_HOST") or None,
            token=env.get("MEDBAY_K8S_TOKEN") or None,
            ca_cert=env.get("MEDBAY_K8S_CA_FILE") or None,
            kubeconfig=env.get("KUBECONFIG") or None,
            context=env.get("MEDBAY_K8S_CONTEXT") or None,
            **kwargs,
        )

    # -- FleetProvider ---------------------------------------------------------------------

    def cordon(self, node: str, reason: str) -> None:
        def change(current: client.V1Node) -> dict | None:
            taint = {"key": FAULT_TAINT, "value": _taint_value(reason), "effect": "NoSchedule"}
            taints = self._other_taints(current) + [taint]
            annotations = _annotations(current)
            if (
                _spec(current).unschedulable
                and taints == self._taint_dicts(current)
                and annotations.get(REASON_ANNOTATION) == reason
            ):
                return None  # already cordoned for this reason; skip the write
            metadata = {REASON_ANNOTATION: reason}
            if _spec(current).unschedulable and REASON_ANNOTATION not in annotations:
                # Someone else had cordoned it first: Medbay's uncordon must leave that.
                metadata[CORDONED_BY_OTHERS_ANNOTATION] = "true"
            return {
                "metadata": {"annotations": metadata},
                "spec": {"unschedulable": True, "taints": taints},
            }

        self._update_node(node, change)

    def uncordon(self, node: str) -> None:
        """Remove Medbay's own taint and cordon; another controller's stay."""

        def change(current: client.V1Node) -> dict | None:
            taints = self._other_taints(current)
            annotations = _annotations(current)
            keep_cordon = annotations.get(CORDONED_BY_OTHERS_ANNOTATION) == "true"
            if REASON_ANNOTATION not in annotations and taints == self._taint_dicts(current):
                return None  # Medbay holds nothing here: whatever cordon there is, is not ours
            return {
                "metadata": {
                    "annotations": {REASON_ANNOTATION: None, CORDONED_BY_OTHERS_ANNOTATION: None}
                },
                "spec": {"unschedulable": keep_cordon, "taints": taints or None},
            }

        self._update_node(node, change)

    def holders(self, node: str) -> list[str]:
        """Other controllers' holds on the node: their taints, and a cordon not Medbay's."""
        with self._translated(f"node {node}", node=node):
            current = self._read_node(node)
        annotations = _annotations(current)
        held = [
            f"taint {t['key']}{'=' + t['value'] if t.get('value') else ''}:{t.get('effect')}"
            for t in self._other_taints(current)
        ]
        others_cordon = REASON_ANNOTATION not in annotations or (
            annotations.get(CORDONED_BY_OTHERS_ANNOTATION) == "true"
        )
        if _spec(current).unschedulable and others_cordon:
            held.insert(0, "cordoned by another controller")
        return held

    def evict(self, node: str, *, timeout_s: float = 300) -> None:
        deadline = self._clock() + timeout_s
        pods = [p for p in self._pods_on(node) if _evictable(p)]
        self._evict_until_allowed(node, pods, deadline)
        self._wait_until_gone(node, {p.metadata.uid for p in pods}, deadline)

    def move_to_pool(self, node: str, pool: str) -> None:
        _check_pool(pool)
        with self._translated(f"node {node}", node=node):
            self._core().patch_node(
                node,
                {"metadata": {"labels": {POOL_LABEL: pool}}},
                _request_timeout=self._timeout,
            )

    def replace(self, node: str, reason: str, *, spares: Sequence[str] = ()) -> str:
        """Bring in the first of SPARES still free (Medbay's choice), else the first free
        spare; a provisioner given to the fleet (a cloud's new machine) has none to choose."""
        failed = self._read_node(node)  # an unknown node is a permanent error, before any change
        replacement = self._replacement_already_made(failed)
        if replacement is None and self._provisioner is not None:
            replacement = self._provisioner(node, reason)
        elif replacement is None:
            replacement = self._bring_in_spare(node, reason, spares=spares)
        # Provision first, delete after: if provisioning fails the cordoned node is still
        # there for the engine to retry or escalate, instead of silently vanishing.
        if replacement != node:
            self._delete_node(node)
        return replacement

    def spare_capacity(self) -> list[str]:
        return sorted(n.metadata.name for n in self._free_spares())

    # -- the inference workload's demand ---------------------------------------------------

    def inference_demand(self, namespace: str, selector: str, hpa: str) -> InferenceDemand:
        """Pods of SELECTOR in NAMESPACE that wait for a node (phase Pending), and the
        replicas the HorizontalPodAutoscaler HPA wants and has ("" : none named)."""
        with self._translated(f"pods in namespace {namespace}"):
            pods = self._core().list_namespaced_pod(
                namespace,
                label_selector=selector or None,
                field_selector="status.phase=Pending",
                _request_timeout=self._timeout,
            )
        pending = sum(1 for pod in pods.items if not (pod.spec and pod.spec.node_name))
        if not hpa:
            return InferenceDemand(pending_pods=pending)
        with self._translated(f"HorizontalPodAutoscaler {namespace}/{hpa}"):
            autoscaler = self._autoscaling().read_namespaced_horizontal_pod_autoscaler(
                hpa, namespace, _request_timeout=self._timeout
            )
        status = autoscaler.status
        return InferenceDemand(
            pending_pods=pending,
            desired_replicas=int(status.desired_replicas or 0) if status else 0,
            current_replicas=int(status.current_replicas or 0) if status else 0,
        )

    # -- the default provisioner -----------------------------------------------------------

    def _bring_in_spare(self, node: str, reason: str, *, spares: Sequence[str] = ()) -> str:
        failed = self._read_node(node)
        pool = _labels(failed).get(POOL_LABEL, "training")
        if pool == "spare":
            pool = "training"  # a spare that failed was in service; send its successor there
        for _ in range(CONFLICT_ATTEMPTS):
            free = self._free_spares()
            if not free:
                raise BackendError(f"no spare capacity to replace {node}", permanent=True)
            by_name = {n.metadata.name: n for n in free}
            chosen = by_name[pick_spare(sorted(by_name), spares)]
            if self._claim_spare(chosen, failed, pool):
                return chosen.metadata.name
        raise BackendError(f"spares kept changing while replacing {node}", permanent=False)

    def _claim_spare(self, spare: client.V1Node, failed: client.V1Node, pool: str) -> bool:
        # The resourceVersion makes this a conditional update: two engines racing for the same
        # spare cannot both win; the loser gets 409 and picks again.
        patch = {
            "metadata": {
                "resourceVersion": spare.metadata.resource_version,
                "labels": {POOL_LABEL: pool},
                "annotations": {
                    REPLACES_ANNOTATION: failed.metadata.name,
                    REPLACES_UID_ANNOTATION: failed.metadata.uid,
                    REASON_ANNOTATION: None,
                },
            },
            "spec": {"unschedulable": False, "taints": self._other_taints(spare) or None},
        }
        return self._patch_node(spare.metadata.name, patch)

    def _replacement_already_made(self, failed: client.V1Node) -> str | None:
        # A crash after claiming a spare but before deleting the failed node must not claim
        # a second spare on retry. The uid, not the name, identifies the failure: hostnames
        # come back after repair, and an old replacement must not count for a new failure.
        with self._translated("the node list"):
            found = self._core().list_node(
                label_selector=POOL_LABEL, _request_timeout=self._timeout
            )
        for candidate in found.items:
            if _annotations(candidate).get(REPLACES_UID_ANNOTATION) == failed.metadata.uid:
                return candidate.metadata.name
        return None

    def _free_spares(self) -> list[client.V1Node]:
        with self._translated("the spare pool"):
            found = self._core().list_node(
                label_selector=f"{POOL_LABEL}=spare", _request_timeout=self._timeout
            )
        return [n for n in found.items if _is_free(n)]

    # -- eviction --------------------------------------------------------------------------

    def _pods_on(self, node: str) -> list[client.V1Pod]:
        with self._translated(f"pods on node {node}"):
            found = self._core().list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={node}", _request_timeout=self._timeout
            )
        return list(found.items)

    def _evict_until_allowed(self, node: str, pods: list[client.V1Pod], deadline: float) -> None:
        blocked = pods
        delay = self._backoff_s
        while True:
            blocked = [p for p in blocked if not self._evict_pod(p)]
            if not blocked:
                return
            remaining = deadline - self._clock()
            if remaining <= 0:
                names = ", ".join(_pod_name(p) for p in blocked)
                raise BackendError(
                    f"eviction from {node} blocked by a PodDisruptionBudget: {names}",
                    permanent=False,
                )
            self._sleep(min(delay, remaining))
            delay = min(delay * 2, self._max_backoff_s)

    def _evict_pod(self, pod: client.V1Pod) -> bool:
        """True once the pod is evicted or already gone; False while a PDB refuses (429)."""
        meta = pod.metadata
        body = client.V1Eviction(
            api_version="policy/v1",
            kind="Eviction",
            metadata=client.V1ObjectMeta(name=meta.name, namespace=meta.namespace),
        )
        try:
            self._core().create_namespaced_pod_eviction(
                meta.name, meta.namespace, body, _request_timeout=self._timeout
            )
        except ApiException as exc:
            if exc.status == 404:
                return True
            if exc.status == 429:
                return False
            raise _backend_error(exc, f"evicting pod {_pod_name(pod)}") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _unreachable(exc, f"evicting pod {_pod_name(pod)}") from exc
        return True

    def _wait_until_gone(self, node: str, uids: set[str], deadline: float) -> None:
        # Evicted pods terminate within their grace period; until then they still hold GPUs.
        while True:
            left = [p for p in self._pods_on(node) if p.metadata.uid in uids]
            if not left:
                return
            remaining = deadline - self._clock()
            if remaining <= 0:
                names = ", ".join(_pod_name(p) for p in left)
                raise BackendError(
                    f"pods on {node} still terminating after eviction: {names}", permanent=False
                )
            self._sleep(min(self._poll_interval_s, remaining))

    # -- node reads and writes -------------------------------------------------------------

    def _update_node(self, node: str, change: Callable[[client.V1Node], dict | None]) -> None:
        for _ in range(CONFLICT_ATTEMPTS):
            current = self._read_node(node)
            patch = change(current)
            if patch is None:
                return
            patch["metadata"]["resourceVersion"] = current.metadata.resource_version
            if self._patch_node(node, patch):
                return
        raise BackendError(f"node {node} kept changing under us; try again", permanent=False)

    def _patch_node(self, node: str, patch: dict) -> bool:
        """Strategic-merge patch; False when the resourceVersion precondition lost a race."""
        try:
            with self._translated(f"node {node}", node=node, passthrough=(409,)):
                self._core().patch_node(node, patch, _request_timeout=self._timeout)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def _read_node(self, node: str) -> client.V1Node:
        with self._translated(f"node {node}", node=node):
            return self._core().read_node(node, _request_timeout=self._timeout)

    def _delete_node(self, node: str) -> None:
        try:
            with self._translated(f"node {node}", node=node, passthrough=(404,)):
                self._core().delete_node(node, _request_timeout=self._timeout)
        except ApiException as exc:
            if exc.status != 404:
                raise  # 404: someone deleted it first, which is what we wanted

    def _taint_dicts(self, current: client.V1Node) -> list[dict]:
        serialize = self._core().api_client.sanitize_for_serialization
        return [serialize(t) for t in (_spec(current).taints or [])]

    def _other_taints(self, current: client.V1Node) -> list[dict]:
        return [t for t in self._taint_dicts(current) if t.get("key") != FAULT_TAINT]

    # -- client and errors -----------------------------------------------------------------

    def _core(self) -> client.CoreV1Api:
        # Built on first use so that selecting this fleet never fails at import or startup
        # on a machine without Kubernetes credentials; the first action reports it instead.
        if self._api is None:
            self._api = client.CoreV1Api(client.ApiClient(self._configuration()))
        return self._api

    def _autoscaling(self) -> client.AutoscalingV2Api:
        return client.AutoscalingV2Api(self._core().api_client)

    def _configuration(self) -> client.Configuration:
        cfg = client.Configuration()
        kubeconfig = self._kubeconfig or os.environ.get("KUBECONFIG")
        try:
            if self._host:
                _configure_explicit(cfg, self._host, self._token, self._ca_cert)
            elif kubeconfig or os.path.exists(os.path.expanduser("~/.kube/config")):
                config.load_kube_config(
                    config_file=kubeconfig, context=self._context, client_configuration=cfg
                )
            else:
                config.load_incluster_config(client_configuration=cfg)
        except (ConfigException, OSError) as exc:
            raise BackendError(
                f"no usable Kubernetes configuration: {exc}", permanent=True
            ) from exc
        if not self._verify_ssl:
            cfg.verify_ssl = False
        return cfg

    @contextmanager
    def _translated(
        self, subject: str, *, node: str | None = None, passthrough: tuple[int, ...] = ()
    ) -> Iterator[None]:
        try:
            yield
        except ApiException as exc:
            if exc.status in passthrough:
                raise
            if exc.status == 404 and node is not None:
                raise BackendError(f"kubernetes node {node} not found", permanent=True) from exc
            raise _backend_error(exc, subject) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _unreachable(exc, subject) from exc


def _configure_explicit(
    cfg: client.Configuration, host: str, token: str | None, ca_cert: str | None
) -> None:
    cfg.host = host.rstrip("/")
    if token:
        cfg.api_key = {"authorization": token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
    if ca_cert:
        cfg.ssl_ca_cert = ca_cert


def _backend_error(exc: ApiException, subject: str) -> BackendError:
    # 5xx, 429 and transport failures (status 0) may pass; the rest are the request's fault
    # or a missing permission, and repeating the same request will not fix them.
    status = exc.status or 0
    transient = status == 0 or status >= 500 or status in (408, 409, 429)
    detail = _status_message(exc)
    if status in (401, 403):
        detail = f"not allowed ({status}): {detail}"
    return BackendError(f"kubernetes API error on {subject}: {detail}", permanent=not transient)


def _unreachable(exc: Exception, subject: str) -> BackendError:
    return BackendError(f"cannot reach the Kubernetes API for {subject}: {exc}", permanent=False)


def _status_message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "")["message"])
    except (ValueError, KeyError, TypeError):
        return f"{exc.status} {exc.reason}"


def _taint_value(reason: str) -> str:
    # Taint values are label values: at most 63 of [A-Za-z0-9_.-], alphanumeric at both ends.
    # The full reason goes in the annotation; the taint gets a recognisable prefix of it.
    value = _TAINT_VALUE_UNSAFE.sub("-", reason)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


def _check_pool(pool: str) -> None:
    if pool not in POOLS:
        raise BackendError(f"unknown pool {pool!r}; expected one of {POOLS}", permanent=True)


def _spec(node: client.V1Node) -> client.V1NodeSpec:
    # The API server omits an empty spec, and the client then leaves the attribute None.
    return node.spec or client.V1NodeSpec()


def _labels(node: client.V1Node) -> dict[str, str]:
    return dict(node.metadata.labels or {})


def _annotations(obj: Any) -> dict[str, str]:
    return dict(obj.metadata.annotations or {})


def _is_ready(node: client.V1Node) -> bool:
    conditions = (node.status.conditions if node.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def _is_free(node: client.V1Node) -> bool:
    spec = _spec(node)
    faulted = any(t.key == FAULT_TAINT for t in (spec.taints or []))
    return _is_ready(node) and not spec.unschedulable and not faulted


def _evictable(pod: client.V1Pod) -> bool:
    # DaemonSet pods would be recreated on the node at once (kubectl drain skips them too);
    # mirror pods belong to the kubelet's static manifests and the API cannot evict them.
    if MIRROR_ANNOTATION in _annotations(pod):
        return False
    owners = pod.metadata.owner_references or []
    return not any(o.kind == "DaemonSet" for o in owners)


def _pod_name(pod: client.V1Pod) -> str:
    return f"{pod.metadata.namespace}/{pod.metadata.name}"
