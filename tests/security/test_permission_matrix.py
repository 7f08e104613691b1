"""Every URL × every role × GET and POST: allowed, refused the right way, never a 500.

The routes come from the URL conf itself (tests/security/routes.py), so a new
page or endpoint is in the matrix the moment it is routed, and fails until its
access is declared in tests/security/access.py.
"""

from __future__ import annotations

import pytest
from django.conf import settings
from django.shortcuts import resolve_url

from tests.security.access import ROLES, acceptable, access_for, outcome
from tests.security.conftest import client_for
from tests.security.routes import all_routes, fill

ROUTES = all_routes()


def test_every_url_has_a_declared_access():
    undeclared = [f"{route.key}  ({route.route})" for route in ROUTES if access_for(route) is None]
    assert not undeclared, (
        "These URLs have no entry in tests/security/access.py ACCESS; add one saying which "
        "roles may GET and POST them:\n  " + "\n  ".join(undeclared)
    )


@pytest.mark.parametrize("route", ROUTES, ids=[f"{r.key}|{r.route}" for r in ROUTES])
def test_each_url_allows_and_refuses_each_role_as_declared(route, world):
    access = access_for(route)
    if access is None:
        pytest.fail(f"{route.key} is not in tests/security/access.py ACCESS; add it.")
    path = fill(route, world)
    login_path = resolve_url(settings.LOGIN_URL)
    wrong = []
    for role in ROLES:
        client = client_for(world, role)
        for method in ("GET", "POST"):
            response = client.get(path) if method == "GET" else client.post(path)
            got = outcome(response, login_path)
            expected = acceptable(access, role, method, route.is_api)
            if got not in expected:
                wrong.append(f"{method} {path} as {role}: got {got}, expected {sorted(expected)}")
    assert not wrong, "\n".join(wrong)
