"""Every URL the portal serves, walked from the URL conf, with its parameters filled.

A new `path()` anywhere is picked up automatically. Its parameters are filled
from PARAMS (by keyword name) or, where a name is ambiguous such as `pk`, from
PARAMS_BY_URL; a parameter found in neither fails the suite loudly, so whoever
adds the URL registers how to reach a real object through it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.resolvers import RegexPattern, RoutePattern
from django.utils.regex_helper import normalize


@dataclass(frozen=True)
class Route:
    """One URL pattern: its key in the access table, its route text and its pieces."""

    key: str
    route: str
    pieces: tuple

    @property
    def is_api(self) -> bool:
        return self.route.startswith("api/")

    @property
    def is_django_admin(self) -> bool:
        return self.route.startswith("admin/")

    def param_names(self) -> list[str]:
        names: list[str] = []
        for piece in self.pieces:
            if isinstance(piece, RoutePattern):
                names += [name for _, name in ROUTE_PARAM.findall(str(piece))]
            else:
                names += normalize(piece.regex.pattern)[0][1]
        return names


ROUTE_PARAM = re.compile(r"<(?:(\w+):)?(\w+)>")


def all_routes() -> list[Route]:
    return list(_walk(get_resolver().url_patterns, (), None))


def _walk(patterns, pieces: tuple, namespace: str | None) -> Iterator[Route]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            inner = namespace
            if pattern.namespace:
                inner = f"{namespace}:{pattern.namespace}" if namespace else pattern.namespace
            yield from _walk(pattern.url_patterns, (*pieces, pattern.pattern), inner)
        elif isinstance(pattern, URLPattern):
            route_pieces = (*pieces, pattern.pattern)
            route = "".join(_display(piece) for piece in route_pieces)
            yield Route(_key(route, pattern.name, namespace), route, route_pieces)


def _display(piece) -> str:
    if isinstance(piece, RegexPattern):
        return normalize(piece.regex.pattern)[0][0].replace("%(", "<").replace(")s", ">")
    return str(piece)


def _key(route: str, name: str | None, namespace: str | None) -> str:
    if not name:
        return route
    full = f"{namespace}:{name}" if namespace else name
    # The API and the pages may reuse a name (`node-detail`); the key tells them apart.
    return f"api:{full}" if route.startswith("api/") else full


# ---------------------------------------------------------------- filling parameters


class UnknownParameter(LookupError):
    """A URL parameter the registry cannot fill: register it so the matrix covers the URL."""


Filler = Callable[[object], object]

# By keyword name; `world` is the fixture in conftest.py with real objects.
PARAMS: dict[str, Filler] = {
    "name": lambda world: world.node.name,
    "slurm_id": lambda world: world.job.slurm_id,
    "cluster": lambda world: world.node.cluster.name,
    "code": lambda world: 79,
    "template_id": lambda world: world.template.pk,
    "format": lambda world: "json",
    "action": lambda world: "cordon",
    "verdict": lambda world: "approve",
    # The Django admin site's own parameters.
    "app_label": lambda world: "auth",
    "object_id": lambda world: world.node.pk,
    "content_type_id": lambda world: world.node_content_type.pk,
    "url": lambda world: "no-such-page/",
}

# Where a keyword means different things on different URLs (`pk`, or `name`
# being a report rather than a node).
PARAMS_BY_URL: dict[str, dict[str, Filler]] = {
    "remediation-detail": {"pk": lambda world: world.remediation.pk},
    "remediation-decide": {"pk": lambda world: world.remediation.pk},
    "remediation-policy-edit": {"pk": lambda world: world.policy.pk},
    "demand-policy-edit": {"pk": lambda world: world.demand_policy.pk},
    "capacity-what-if": {"pk": lambda world: world.demand_policy.pk},
    "api:remediation-detail": {"pk": lambda world: world.remediation.pk},
    "api:remediation-approve": {"pk": lambda world: world.remediation.pk},
    "api:remediation-reject": {"pk": lambda world: world.remediation.pk},
    "api:remediation-cancel": {"pk": lambda world: world.remediation.pk},
    "api:remediation-retry": {"pk": lambda world: world.remediation.pk},
    "api:remediation-release": {"pk": lambda world: world.remediation.pk},
    "report": {"name": lambda world: "utilization"},
    "api:api-report": {"name": lambda world: "utilization"},
    "api:api-report-csv": {"name": lambda world: "utilization"},
    "admin:auth_user_password_change": {"id": lambda world: world.users["researcher"].pk},
    "api-token-revoke": {"token_id": lambda world: _api_token(world).pk},
    "agent-token-revoke": {"token_id": lambda world: _node_token(world).pk},
    "remediation-decide-again": {"pk": lambda world: _undecidable(world).pk},
    "fault-group": {"pk": lambda world: _fault_group(world).pk},
    "fault-group-split": {"pk": lambda world: _fault_group(world).pk},
    "fault-group-decide": {
        "pk": lambda world: _fault_group(world).pk,
        "decision": lambda world: "release",
    },
}


def _undecidable(world):
    from django.utils import timezone

    from health.models import Incident

    now = timezone.now()
    return Incident.objects.create(
        node=world.node, opened_at=now, last_event_at=now, decision_error="could not be decided: x"
    )


def _fault_group(world):
    from django.utils import timezone

    from health.models import FaultGroup, FaultGroupKind

    return FaultGroup.objects.create(
        kind=FaultGroupKind.PART,
        cluster_id=world.node.cluster_id,
        part="switch leaf1",
        rule="test",
        window_s=10,
        opened_at=timezone.now(),
    )


def _api_token(world):
    from identity.accounts import issue_api_token

    return issue_api_token(world.users["researcher"], "matrix")[0]


def _node_token(world):
    from health.models import NodeToken

    return NodeToken.issue(world.node)[0]


def fill(route: Route, world, raw: dict[str, str] | None = None) -> str:
    """The route as a concrete path ("/nodes/gpu-01/"), or UnknownParameter.

    `raw` gives some parameters' text as it goes into the path (already
    percent-encoded), e.g. a fuzzer's value that no converter would accept.
    """
    values: dict[str, str] = dict(raw or {})
    for name in route.param_names():
        if name in values:
            continue
        filler = PARAMS_BY_URL.get(route.key, {}).get(name) or PARAMS.get(name)
        if filler is None:
            raise UnknownParameter(
                f"URL {route.key!r} ({route.route}) has a parameter {name!r} that "
                f"tests/security/routes.py cannot fill: add it to PARAMS, or to "
                f"PARAMS_BY_URL[{route.key!r}] if the name is ambiguous."
            )
        values[name] = str(filler(world))
    return "/" + "".join(_concrete(piece, values) for piece in route.pieces)


def _concrete(piece, values: dict[str, str]) -> str:
    if isinstance(piece, RoutePattern):
        # The converter writes the value as the URL expects it (DRF's format
        # suffix converter adds the dot, for one).
        return ROUTE_PARAM.sub(
            lambda match: piece.converters[match.group(2)].to_url(values[match.group(2)]),
            str(piece),
        )
    template, _ = normalize(piece.regex.pattern)[0]
    return template % values
