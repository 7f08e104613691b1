"""Every form the portal renders is CSRF-protected: without the token a POST gets a 403.

Each page is fetched as every role that may see it; every `<form method="post">`
and every htmx `hx-post`/`hx-put`/`hx-patch`/`hx-delete` on it is then sent
without a token by a client that enforces CSRF, as the same user. The Django
admin's own pages are left to Django, apart from its log-in form.
"""

from __future__ import annotations

from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

import pytest

from tests.security.access import ROLES, access_for
from tests.security.conftest import client_for
from tests.security.routes import all_routes, fill

HTMX_METHODS = {"hx-post": "POST", "hx-put": "PUT", "hx-patch": "PATCH", "hx-delete": "DELETE"}


class Targets(HTMLParser):
    """Collects (method, action) pairs and forms that post without a token field."""

    def __init__(self, page_path: str):
        super().__init__()
        self.page_path = page_path
        self.targets: set[tuple[str, str]] = set()
        self.tokenless_forms: list[str] = []
        self._form: dict | None = None

    def handle_starttag(self, tag, attrs):
        attrs = {name: value or "" for name, value in attrs}
        for attribute, method in HTMX_METHODS.items():
            if attribute in attrs:
                self.targets.add((method, self._resolve(attrs[attribute])))
        if tag == "form" and attrs.get("method", "get").lower() == "post":
            self._form = {"action": self._resolve(attrs.get("action", "")), "token": False}
        elif tag == "input" and self._form and attrs.get("name") == "csrfmiddlewaretoken":
            self._form["token"] = True

    def handle_endtag(self, tag):
        if tag == "form" and self._form:
            self.targets.add(("POST", self._form["action"]))
            if not self._form["token"]:
                self.tokenless_forms.append(self._form["action"])
            self._form = None

    def _resolve(self, action: str) -> str:
        return urljoin(self.page_path, action or self.page_path)


def _pages():
    for route in all_routes():
        access = access_for(route)
        if access is None or isinstance(access, str) or access.get is None:
            continue
        yield route, access


PAGES = list(_pages())


@pytest.mark.parametrize("route,access", PAGES, ids=[route.key for route, _ in PAGES])
def test_every_form_on_the_page_refuses_a_post_without_a_csrf_token(route, access, world):
    path = fill(route, world)
    problems = []
    for role in ROLES:
        if role not in access.get:
            continue
        response = client_for(world, role).get(path)
        if "html" not in response.get("Content-Type", ""):
            continue
        found = Targets(path)
        found.feed(response.content.decode(errors="replace"))
        problems += [f"form to {a} on {path} has no csrf token" for a in found.tokenless_forms]
        strict = client_for(world, role, enforce_csrf_checks=True)
        for method, action in sorted(found.targets):
            if urlsplit(action).netloc:
                continue  # another site: not ours to test
            answer = strict.generic(method, action)
            if answer.status_code != 403 or b"CSRF" not in answer.content:
                problems.append(
                    f"{method} {action} (from {path} as {role}) without a token: "
                    f"{answer.status_code}, not a CSRF 403"
                )
    assert not problems, "\n".join(problems)


def test_the_scan_finds_the_login_form_and_the_logout_form_on_the_board(world):
    login = Targets("/login/")
    login.feed(client_for(world, "anonymous").get("/login/").content.decode())
    board = Targets("/")
    board.feed(client_for(world, "researcher").get("/").content.decode())

    assert ("POST", "/login/") in login.targets
    assert ("POST", "/logout/") in board.targets
    assert not login.tokenless_forms and not board.tokenless_forms
