"""A tiny Kubernetes API server that speaks the real wire format, for driver tests.

No real API server can run on the development machines, so the Kubernetes fleet driver is
tested against this instead. It serves the REST paths, query parameters, patch content types
and JSON shapes (objects, lists, `Status` errors) that `kubernetes.client.CoreV1Api` uses, and
keeps the semantics the driver depends on: strategic-merge patches replace atomic lists such as
`spec.taints`, `metadata.resourceVersion` in a patch is an optimistic-concurrency precondition,
evictions answer 429 while a PodDisruptionBudget blocks them, and deletions may linger.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

ALWAYS = -1  # pdb_blocks value: the disruption budget never allows this pod's eviction

# Strategic-merge list semantics for the Node fields Medbay touches, from the patchMergeKey and
# patchStrategy tags in k8s.io/api/core/v1. Every other list is atomic (replaced whole): notably
# spec.taints, which is why the driver must send the complete taint list it wants.
NODE_MERGE_KEYS = {
    ("status", "conditions"): "type",
    ("status", "addresses"): "type",
}
NODE_MERGED_PRIMITIVE_LISTS = {("metadata", "finalizers"), ("spec", "podCIDRs")}

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
TAINT_EFFECTS = {"NoSchedule", "PreferNoSchedule", "NoExecute"}
PATCH_TYPES = (
    "application/strategic-merge-patch+json",
    "application/merge-patch+json",
    "application/json-patch+json",
)


class ApiError(Exception):
    """An error the fake answers with a `Status` body, as the real API server does."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details


@dataclass
class RecordedRequest:
    """One request as the server received it, for tests to assert on."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str
    authorization: str
    body: Any


@dataclass
class _Injected:
    code: int
    times: int
    method: str | None
    path: str | None


@dataclass
class _PodState:
    obj: dict
    pdb_blocks: int = 0  # ALWAYS, or how many more eviction attempts the PDB refuses
    linger_lists: int = 0  # how many pod lists still show it terminating after eviction
    evicted: bool = False
    vanish_on_eviction: bool = False  # deleted by someone else between the list and the POST


@dataclass
class FakeApiServer:
    """Nodes and pods in memory, served over HTTP on 127.0.0.1 at a random port."""

    token: str = "medbay-test-token"
    nodes: dict[str, dict] = field(default_factory=dict)
    pods: dict[tuple[str, str], _PodState] = field(default_factory=dict)
    # HorizontalPodAutoscalers (autoscaling/v2) by (namespace, name): read only.
    hpas: dict[tuple[str, str], dict] = field(default_factory=dict)
    requests: list[RecordedRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.RLock()
        self._versions = itertools.count(1000)
        self._injected: list[_Injected] = []
        self._httpd: ThreadingHTTPServer | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> FakeApiServer:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        serve = self._httpd.serve_forever
        threading.Thread(target=serve, kwargs={"poll_interval": 0.02}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    @property
    def url(self) -> str:
        assert self._httpd is not None, "start() the server first"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    # -- seeding and inspection ------------------------------------------------------------

    def add_node(
        self,
        name: str,
        *,
        pool: str | None = "training",
        ready: bool = True,
        unschedulable: bool = False,
        taints: list[dict] | None = None,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
    ) -> dict:
        all_labels = {"kubernetes.io/hostname": name, **(labels or {})}
        if pool is not None:
            all_labels["medbay.io/pool"] = pool
        spec: dict[str, Any] = {"providerID": f"fake://{name}"}
        if unschedulable:
            spec["unschedulable"] = True
        if taints:
            spec["taints"] = copy.deepcopy(taints)
        node = {
            "kind": "Node",
            "apiVersion": "v1",
            "metadata": self._new_metadata(name, None, all_labels, annotations),
            "spec": spec,
            "status": _node_status(name, ready),
        }
        with self._lock:
            self.nodes[name] = node
        return copy.deepcopy(node)

    def add_pod(
        self,
        name: str,
        node: str,
        *,
        namespace: str = "default",
        owner_kind: str | None = "ReplicaSet",
        mirror: bool = False,
        pdb_blocks: int = 0,
        linger_lists: int = 0,
        vanish_on_eviction: bool = False,
        labels: dict[str, str] | None = None,
        phase: str = "Running",
    ) -> dict:
        """A pod on NODE; with node "" and phase "Pending", one waiting for a node."""
        annotations = {"kubernetes.io/config.mirror": uuid.uuid4().hex} if mirror else None
        metadata = self._new_metadata(name, namespace, labels or {"app": name}, annotations)
        if owner_kind is not None and not mirror:
            metadata["ownerReferences"] = [_owner_reference(owner_kind, f"{name}-owner")]
        if mirror:
            metadata["ownerReferences"] = [_owner_reference("Node", node, api_version="v1")]
        pod = {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": metadata,
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
            "status": {"phase": phase, "conditions": [_condition("Ready", phase == "Running")]},
        }
        if node:
            pod["spec"]["nodeName"] = node
        with self._lock:
            self.pods[(namespace, name)] = _PodState(
                pod, pdb_blocks, linger_lists, vanish_on_eviction=vanish_on_eviction
            )
        return copy.deepcopy(pod)

    def add_hpa(
        self, name: str, *, namespace: str = "default", desired: int = 1, current: int = 1
    ) -> dict:
        """A HorizontalPodAutoscaler whose status wants DESIRED replicas and has CURRENT."""
        hpa = {
            "kind": "HorizontalPodAutoscaler",
            "apiVersion": "autoscaling/v2",
            "metadata": self._new_metadata(name, namespace, {}, None),
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                "minReplicas": 1,
                "maxReplicas": 100,
            },
            "status": {"currentReplicas": current, "desiredReplicas": desired},
        }
        with self._lock:
            self.hpas[(namespace, name)] = hpa
        return copy.deepcopy(hpa)

    def node(self, name: str) -> dict:
        with self._lock:
            return copy.deepcopy(self.nodes[name])

    def pod_names(self) -> set[str]:
        with self._lock:
            return {name for (_, name) in self.pods}

    def fail_next(
        self, code: int, *, times: int = 1, method: str | None = None, path: str | None = None
    ) -> None:
        """Answer the next `times` matching requests with an error `Status` of this code."""
        with self._lock:
            self._injected.append(_Injected(code, times, method, path))

    def requests_matching(self, method: str, path_prefix: str = "") -> list[RecordedRequest]:
        with self._lock:
            return [
                r for r in self.requests if r.method == method and r.path.startswith(path_prefix)
            ]

    # -- request handling (called from the handler threads) --------------------------------

    def handle(self, request: RecordedRequest) -> tuple[int, dict]:
        with self._lock:
            self.requests.append(request)
            try:
                self._authenticate(request)
                self._raise_injected(request)
                return self._route(request)
            except ApiError as exc:
                return exc.code, _status_failure(exc)

    def _authenticate(self, request: RecordedRequest) -> None:
        if request.authorization != f"Bearer {self.token}":
            raise ApiError(401, "Unauthorized", "Unauthorized")

    def _raise_injected(self, request: RecordedRequest) -> None:
        for injected in self._injected:
            if injected.times == 0:
                continue
            if injected.method not in (None, request.method):
                continue
            if injected.path is not None and not request.path.startswith(injected.path):
                continue
            injected.times -= 1
            raise _injected_error(injected.code, request.path)

    def _route(self, request: RecordedRequest) -> tuple[int, dict]:
        parts = request.path.strip("/").split("/")
        if parts[:3] == ["apis", "autoscaling", "v2"]:
            return self._route_hpas(request, parts[3:])
        if parts[:2] != ["api", "v1"]:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        rest = parts[2:]
        if rest[:1] == ["nodes"]:
            return self._route_nodes(request, rest[1:])
        if rest == ["pods"]:
            return self._only("GET", request, lambda: self._list_pods(None, request.query))
        if rest[:1] == ["namespaces"] and len(rest) >= 3 and rest[2] == "pods":
            return self._route_pods(request, rest[1], rest[3:])
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    def _route_nodes(self, request: RecordedRequest, rest: list[str]) -> tuple[int, dict]:
        if not rest:
            return self._only("GET", request, lambda: self._list_nodes(request.query))
        name = rest[0]
        if request.method == "GET":
            return 200, self._get_node(name)
        if request.method == "PATCH":
            return 200, self._patch_node(name, request)
        if request.method == "DELETE":
            return 200, self._delete_node(name)
        raise _method_not_allowed()

    def _route_pods(self, request: RecordedRequest, ns: str, rest: list[str]) -> tuple[int, dict]:
        if not rest:
            return self._only("GET", request, lambda: self._list_pods(ns, request.query))
        if len(rest) == 1:
            return self._only("GET", request, lambda: self._get_pod(ns, rest[0]))
        if rest[1:] == ["eviction"]:
            return self._only("POST", request, lambda: self._evict(ns, rest[0], request.body))
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    def _route_hpas(self, request: RecordedRequest, rest: list[str]) -> tuple[int, dict]:
        if len(rest) != 4 or rest[0] != "namespaces" or rest[2] != "horizontalpodautoscalers":
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        hpa = self.hpas.get((rest[1], rest[3]))
        if hpa is None:
            raise _not_found("horizontalpodautoscalers.autoscaling", rest[3])
        return self._only("GET", request, lambda: (200, copy.deepcopy(hpa)))

    @staticmethod
    def _only(method: str, request: RecordedRequest, action) -> tuple[int, dict]:
        if request.method != method:
            raise _method_not_allowed()
        return action()

    # -- nodes -----------------------------------------------------------------------------

    def _get_node(self, name: str) -> dict:
        if name not in self.nodes:
            raise _not_found("nodes", name)
        return copy.deepcopy(self.nodes[name])

    def _list_nodes(self, query: dict[str, str]) -> tuple[int, dict]:
        selector = _parse_label_selector(query.get("labelSelector", ""))
        fields = _parse_field_selector(query.get("fieldSelector", ""))
        items = [
            _as_list_item(node)
            for node in self.nodes.values()
            if _labels_match(node, selector) and _fields_match(node, fields)
        ]
        return 200, self._list("NodeList", items)

    def _patch_node(self, name: str, request: RecordedRequest) -> dict:
        current = self._get_node(name)
        patched = _apply_patch(current, request.content_type, request.body)
        _check_precondition(name, current, request)
        _validate_node(name, current, patched)
        patched["metadata"]["resourceVersion"] = str(next(self._versions))
        self.nodes[name] = patched
        return copy.deepcopy(patched)

    def _delete_node(self, name: str) -> dict:
        node = self._get_node(name)
        del self.nodes[name]
        details = {"name": name, "kind": "nodes", "uid": node["metadata"]["uid"]}
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": details,
        }

    # -- pods ------------------------------------------------------------------------------

    def _get_pod(self, ns: str, name: str) -> tuple[int, dict]:
        state = self.pods.get((ns, name))
        if state is None:
            raise _not_found("pods", name)
        return 200, copy.deepcopy(state.obj)

    def _list_pods(self, ns: str | None, query: dict[str, str]) -> tuple[int, dict]:
        selector = _parse_label_selector(query.get("labelSelector", ""))
        fields = _parse_field_selector(query.get("fieldSelector", ""))
        items = []
        for key, state in list(self.pods.items()):
            if ns is not None and key[0] != ns:
                continue
            if _labels_match(state.obj, selector) and _fields_match(state.obj, fields):
                items.append(_as_list_item(state.obj))
                self._age_terminating(key, state)
        return 200, self._list("PodList", items)

    def _age_terminating(self, key: tuple[str, str], state: _PodState) -> None:
        # An evicted pod stays listed, terminating, for its grace period; the fake counts lists.
        if not state.evicted:
            return
        state.linger_lists -= 1
        if state.linger_lists < 0:
            del self.pods[key]

    def _evict(self, ns: str, name: str, body: Any) -> tuple[int, dict]:
        _validate_eviction(name, body)
        state = self.pods.get((ns, name))
        if state is not None and state.vanish_on_eviction:
            del self.pods[(ns, name)]
            state = None
        if state is None:
            raise _not_found("pods", name)
        if state.pdb_blocks == ALWAYS or state.pdb_blocks > 0:
            if state.pdb_blocks > 0:
                state.pdb_blocks -= 1
            raise _disruption_budget_refusal(name)
        self._terminate(ns, name, state)
        return 201, {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }

    def _terminate(self, ns: str, name: str, state: _PodState) -> None:
        if state.linger_lists <= 0:
            del self.pods[(ns, name)]
            return
        state.evicted = True
        state.obj["metadata"]["deletionTimestamp"] = _now()
        state.obj["metadata"]["deletionGracePeriodSeconds"] = 30
        state.obj["metadata"]["resourceVersion"] = str(next(self._versions))

    # -- helpers ---------------------------------------------------------------------------

    def _new_metadata(
        self, name: str, namespace: str | None, labels: dict, annotations: dict | None
    ) -> dict:
        metadata: dict[str, Any] = {
            "name": name,
            "uid": str(uuid.uuid4()),
            "resourceVersion": str(next(self._versions)),
            "creationTimestamp": _now(),
            "labels": dict(labels),
        }
        if namespace is not None:
            metadata["namespace"] = namespace
        if annotations:
            metadata["annotations"] = dict(annotations)
        return metadata

    def _list(self, kind: str, items: list[dict]) -> dict:
        return {
            "kind": kind,
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(next(self._versions))},
            "items": items,
        }


# -- HTTP plumbing ---------------------------------------------------------------------------


def _handler_for(server: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as urllib3's pool expects

        def do_GET(self) -> None:
            self._serve()

        do_PATCH = do_POST = do_DELETE = do_PUT = do_GET

        def _serve(self) -> None:
            try:
                request = self._parse()
            except ApiError as exc:
                self._send(exc.code, _status_failure(exc))
                return
            self._send(*server.handle(request))

        def _parse(self) -> RecordedRequest:
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError as exc:
                raise ApiError(400, "BadRequest", f"invalid JSON body: {exc}") from exc
            return RecordedRequest(
                method=self.command,
                path=unquote(url.path),
                query=query,
                content_type=(self.headers.get("Content-Type") or "").split(";")[0].strip(),
                authorization=self.headers.get("Authorization") or "",
                body=body,
            )

        def _send(self, code: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return  # keep pytest output clean; tests read server.requests instead

    return Handler


# -- Kubernetes object shapes ----------------------------------------------------------------


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(kind: str, ok: bool) -> dict:
    stamp = _now()
    return {
        "type": kind,
        "status": "True" if ok else "False",
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
        "reason": "KubeletReady" if ok else "KubeletNotReady",
        "message": "kubelet is posting ready status" if ok else "PLEG is not healthy",
    }


def _node_status(name: str, ready: bool) -> dict:
    return {
        "capacity": {"cpu": "96", "memory": "1056561152Ki", "nvidia.com/gpu": "8", "pods": "110"},
        "allocatable": {"cpu": "95", "memory": "1046075392Ki", "nvidia.com/gpu": "8"},
        "conditions": [
            {**_condition("MemoryPressure", False), "reason": "KubeletHasSufficientMemory"},
            _condition("Ready", ready),
        ],
        "addresses": [
            {"type": "InternalIP", "address": "10.0.0.10"},
            {"type": "Hostname", "address": name},
        ],
        "nodeInfo": {
            "architecture": "amd64",
            "bootID": str(uuid.uuid4()),
            "containerRuntimeVersion": "containerd://1.7.22",
            "kernelVersion": "6.8.0-45-generic",
            "kubeProxyVersion": "v1.31.1",
            "kubeletVersion": "v1.31.1",
            "machineID": uuid.uuid4().hex,
            "operatingSystem": "linux",
            "osImage": "Ubuntu 24.04.1 LTS",
            "systemUUID": str(uuid.uuid4()).upper(),
        },
    }


def _owner_reference(kind: str, name: str, api_version: str = "apps/v1") -> dict:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": str(uuid.uuid4()),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _as_list_item(obj: dict) -> dict:
    # The real API server leaves kind and apiVersion off the items of a list.
    item = copy.deepcopy(obj)
    item.pop("kind", None)
    item.pop("apiVersion", None)
    return item


def _status_failure(exc: ApiError) -> dict:
    status: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": exc.message,
        "reason": exc.reason,
        "code": exc.code,
    }
    if exc.details is not None:
        status["details"] = exc.details
    return status


def _not_found(kind: str, name: str) -> ApiError:
    details = {"name": name, "kind": kind}
    return ApiError(404, "NotFound", f'{kind} "{name}" not found', details)


def _method_not_allowed() -> ApiError:
    return ApiError(405, "MethodNotAllowed", "the server does not allow this method")


def _conflict(name: str) -> ApiError:
    message = (
        f'Operation cannot be fulfilled on nodes "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    return ApiError(409, "Conflict", message, {"name": name, "kind": "nodes"})


def _disruption_budget_refusal(pod: str) -> ApiError:
    details = {
        "causes": [
            {
                "reason": "DisruptionBudget",
                "message": f"The disruption budget {pod}-pdb needs 1 healthy pods "
                "and has 1 currently",
            }
        ]
    }
    message = "Cannot evict pod as it would violate the pod's disruption budget."
    return ApiError(429, "TooManyRequests", message, details)


def _injected_error(code: int, path: str) -> ApiError:
    name = path.rstrip("/").rsplit("/", 1)[-1]
    if code == 403:
        message = (
            f'nodes "{name}" is forbidden: User "system:serviceaccount:medbay:medbay" '
            'cannot patch resource "nodes" in API group "" at the cluster scope'
        )
        return ApiError(403, "Forbidden", message, {"name": name, "kind": "nodes"})
    if code == 409:
        return _conflict(name)
    if code == 429:
        return _disruption_budget_refusal(name)
    if code == 503:
        return ApiError(503, "ServiceUnavailable", "the server is currently unable to handle it")
    return ApiError(code, "InternalError", "Internal error occurred: etcdserver: request timed out")


# -- selectors -------------------------------------------------------------------------------


def _parse_label_selector(text: str) -> list[tuple[str, str, str | None]]:
    """`a=b,c!=d,e,!f` as (key, op, value) triples; set-based `in (...)` is not needed here."""
    terms = []
    for raw in filter(None, (t.strip() for t in text.split(","))):
        if "!=" in raw:
            key, value = raw.split("!=", 1)
            terms.append((key, "!=", value))
        elif "=" in raw:
            key, value = raw.replace("==", "=").split("=", 1)
            terms.append((key, "=", value))
        elif raw.startswith("!"):
            terms.append((raw[1:], "!", None))
        else:
            terms.append((raw, "exists", None))
    return terms


def _labels_match(obj: dict, terms: list[tuple[str, str, str | None]]) -> bool:
    labels = obj["metadata"].get("labels") or {}
    for key, op, value in terms:
        if op == "=" and labels.get(key) != value:
            return False
        if op == "!=" and labels.get(key) == value:
            return False
        if op == "exists" and key not in labels:
            return False
        if op == "!" and key in labels:
            return False
    return True


def _parse_field_selector(text: str) -> list[tuple[str, str]]:
    terms = []
    for raw in filter(None, (t.strip() for t in text.split(","))):
        if "=" not in raw or "!=" in raw:
            raise ApiError(400, "BadRequest", f'unable to parse requirement: "{raw}"')
        key, value = raw.replace("==", "=").split("=", 1)
        if key not in ("metadata.name", "metadata.namespace", "spec.nodeName", "status.phase"):
            message = f'field label not supported: "{key}"'
            raise ApiError(400, "BadRequest", message)
        terms.append((key, value))
    return terms


def _fields_match(obj: dict, terms: list[tuple[str, str]]) -> bool:
    for key, value in terms:
        section, name = key.split(".", 1)
        if (obj.get(section) or {}).get(name, "") != value:
            return False
    return True


# -- patches ---------------------------------------------------------------------------------


def _apply_patch(current: dict, content_type: str, body: Any) -> dict:
    if content_type == "application/strategic-merge-patch+json":
        return _strategic_merge(current, _require_object(body), ())
    if content_type == "application/merge-patch+json":
        return _merge_patch(current, _require_object(body))
    if content_type == "application/json-patch+json":
        if not isinstance(body, list):
            raise ApiError(400, "BadRequest", "json patch must be a list of operations")
        return _json_patch(current, body)
    message = (
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(PATCH_TYPES)
    )
    raise ApiError(415, "UnsupportedMediaType", message)


def _require_object(body: Any) -> dict:
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "patch body must be a JSON object")
    return body


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes, everything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch(result.get(key), value)
    return result


def _strategic_merge(target: Any, patch: Any, path: tuple[str, ...]) -> Any:
    """Kubernetes strategic merge for a Node: like RFC 7386, but lists follow their tags."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue  # $setElementOrder/... and $retainKeys only affect ordering and pruning
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list):
            result[key] = _merge_list(result.get(key) or [], value, (*path, key))
        else:
            result[key] = _strategic_merge(result.get(key), value, (*path, key))
    return result


def _merge_list(current: list, patch: list, path: tuple[str, ...]) -> list:
    if path in NODE_MERGED_PRIMITIVE_LISTS:
        return current + [v for v in patch if v not in current]
    merge_key = NODE_MERGE_KEYS.get(path)
    if merge_key is None:
        return copy.deepcopy(patch)  # atomic list, e.g. spec.taints
    merged = {item[merge_key]: item for item in copy.deepcopy(current)}
    for item in patch:
        if item.get("$patch") == "delete":
            merged.pop(item[merge_key], None)
        else:
            merged[item[merge_key]] = _strategic_merge(merged.get(item[merge_key]), item, path)
    return list(merged.values())


def _json_patch(document: dict, operations: list) -> dict:
    """RFC 6902 with RFC 6901 pointers (`medbay.io~1pool` is the label `medbay.io/pool`)."""
    result = copy.deepcopy(document)
    for op in operations:
        kind, path = op.get("op"), op.get("path", "")
        if kind == "test":
            if _pointer_get(result, path) != op.get("value"):
                raise ApiError(422, "Invalid", f"the test operation at {path} failed")
        elif kind == "remove":
            _pointer_remove(result, path)
        elif kind in ("add", "replace"):
            if kind == "replace":
                _pointer_get(result, path)  # replace requires the target to exist
            _pointer_set(result, path, copy.deepcopy(op.get("value")), insert=kind == "add")
        elif kind in ("move", "copy"):
            value = copy.deepcopy(_pointer_get(result, op.get("from", "")))
            if kind == "move":
                _pointer_remove(result, op["from"])
            _pointer_set(result, path, value, insert=True)
        else:
            raise ApiError(400, "BadRequest", f"unknown json patch operation {kind!r}")
    return result


def _pointer_tokens(path: str) -> list[str]:
    if not path.startswith("/"):
        raise ApiError(400, "BadRequest", f"invalid json pointer {path!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _pointer_parent(doc: Any, path: str) -> tuple[Any, str]:
    tokens = _pointer_tokens(path)
    parent = doc
    for token in tokens[:-1]:
        parent = _pointer_step(parent, token, path)
    return parent, tokens[-1]


def _pointer_step(node: Any, token: str, path: str) -> Any:
    try:
        return node[int(token)] if isinstance(node, list) else node[token]
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        raise ApiError(422, "Invalid", f"json patch path {path} does not exist") from exc


def _pointer_get(doc: Any, path: str) -> Any:
    parent, last = _pointer_parent(doc, path)
    return _pointer_step(parent, last, path)


def _pointer_set(doc: Any, path: str, value: Any, *, insert: bool) -> None:
    parent, last = _pointer_parent(doc, path)
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if insert:
            parent.insert(index, value)
        else:
            parent[index] = value
    elif isinstance(parent, dict):
        parent[last] = value
    else:
        raise ApiError(422, "Invalid", f"json patch path {path} does not exist")


def _pointer_remove(doc: Any, path: str) -> None:
    parent, last = _pointer_parent(doc, path)
    _pointer_step(parent, last, path)
    if isinstance(parent, list):
        del parent[int(last)]
    else:
        del parent[last]


# -- validation ------------------------------------------------------------------------------


def _check_precondition(name: str, current: dict, request: RecordedRequest) -> None:
    # A resourceVersion in an object patch makes the write conditional, as on the real server.
    if not isinstance(request.body, dict):
        return
    wanted = (request.body.get("metadata") or {}).get("resourceVersion")
    if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
        raise _conflict(name)


def _validate_node(name: str, before: dict, after: dict) -> None:
    problems = []
    for field_name in ("name", "uid"):
        if after["metadata"].get(field_name) != before["metadata"].get(field_name):
            problems.append(f"metadata.{field_name}: Invalid value: field is immutable")
    for key, value in (after["metadata"].get("labels") or {}).items():
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
            problems.append(f"metadata.labels: Invalid value: {value!r} for {key}")
    problems.extend(_taint_problems(after["spec"].get("taints") or []))
    if problems:
        details = {"name": name, "kind": "Node", "causes": [{"message": p} for p in problems]}
        message = f'Node "{name}" is invalid: ' + "; ".join(problems)
        raise ApiError(422, "Invalid", message, details)


def _taint_problems(taints: list) -> list[str]:
    problems, seen = [], set()
    for taint in taints:
        key, effect, value = taint.get("key"), taint.get("effect"), taint.get("value", "")
        if not key:
            problems.append("spec.taints.key: Required value")
        if effect not in TAINT_EFFECTS:
            problems.append(f"spec.taints.effect: Unsupported value: {effect!r}")
        if len(value) > 63 or not LABEL_VALUE.match(value):
            problems.append(f"spec.taints.value: Invalid value: {value!r}")
        if (key, effect) in seen:
            problems.append(f"spec.taints: Duplicate value: {key}:{effect}")
        seen.add((key, effect))
    return problems


def _validate_eviction(name: str, body: Any) -> None:
    if not isinstance(body, dict) or body.get("kind") != "Eviction":
        raise ApiError(400, "BadRequest", "the body must be an Eviction")
    if body.get("apiVersion") not in ("policy/v1", "policy/v1beta1"):
        raise ApiError(400, "BadRequest", f"unsupported Eviction version {body.get('apiVersion')}")
    if (body.get("metadata") or {}).get("name") != name:
        raise ApiError(400, "BadRequest", "name in URL does not match name in Eviction object")
