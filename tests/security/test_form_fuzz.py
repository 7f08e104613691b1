"""Hypothesis fuzzes every HTML form and every path converter, as each role: never a 5xx.

The targets are read, not listed: every URL in the URL conf is opened as the
role (tests/security/routes.py fills its parameters with real objects), and
every `<form>` on the answer is parsed for its method, its action (and its
hx-get/hx-post) and its fields with their values. Each field is then sent as
its own value, left out, or as hostile text: NUL, lone surrogates (encoded as
a client must, UTF-8 with surrogatepass), integers past 2**63, dates near years
1 and 9999, long strings. Separately each path parameter of each URL gets the
same values. Run on PostgreSQL in CI (DATABASE_URL), where NUL and overflows
turned into 500s; the examples per target are few so the whole file stays
under a minute on two cores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, timezone
from html.parser import HTMLParser
from urllib.parse import quote, urljoin, urlsplit

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.security.conftest import client_for
from tests.security.routes import all_routes, fill

pytestmark = pytest.mark.django_db

ROLES = ("researcher", "manager", "admin")
FORM_EXAMPLES = 10
PATH_EXAMPLES = 4
FUZZ = settings(
    max_examples=FORM_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
    suppress_health_check=list(HealthCheck),
)

NASTY = [
    "\x00",
    "gpu-01\x00",
    "\ud800",
    "a\udfffb",
    str(2**63),
    str(-(2**63) - 1),
    "9" * 40,
    "-" + "9" * 40,
    "1e309",
    "NaN",
    "9999-12-31",
    "0001-01-01",
    "9999-12-31T23:59:59-23:59",
    "0001-01-01T00:00:00+23:59",
    "99999-01-01",
    "2024-02-30",
    "",
    " ",
    "x" * 10_000,
    "../../etc/passwd",
    "<script>alert(1)</script>",
    "'\"; --",
    "%",
    "\u202e\ufeff",
]
FAR_MOMENTS = st.datetimes(
    min_value=datetime(1, 1, 2),
    max_value=datetime(9999, 12, 30),
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=23, minutes=59))]),
)
HOSTILE = st.one_of(
    st.sampled_from(NASTY),
    st.text(st.characters(exclude_categories=()), max_size=30),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.dates(min_value=date(1, 1, 1), max_value=date(9999, 12, 31)).map(str),
    FAR_MOMENTS.map(datetime.isoformat),
    st.integers(min_value=300, max_value=20_000).map(lambda n: "y" * n),
)
LEFT_OUT = None


def encoded(text: str) -> str:
    """Percent-encoded as a browser would send it; lone surrogates as their UTF-8 bytes."""
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


def form_body(values: dict[str, str | None]) -> str:
    return "&".join(
        f"{encoded(name)}={encoded(value)}" for name, value in values.items() if value is not None
    )


# ---------------------------------------------------------------- finding the forms


@dataclass(frozen=True)
class Target:
    """One place a form sends to, with its fields' names and the values the page gave them."""

    method: str
    url: str
    fields: tuple[tuple[str, tuple[str, ...]], ...]
    found_on: str

    def __str__(self) -> str:
        return f"{self.method} {self.url} (form on {self.found_on})"


@dataclass
class _Form:
    attrs: dict
    fields: dict[str, list[str]] = field(default_factory=dict)


class FormParser(HTMLParser):
    """Each <form>'s attributes and its fields, with every value the page offers."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.forms: list[_Form] = []
        self._form: _Form | None = None
        self._textarea: str | None = None

    def _add(self, name: str | None, value: str) -> None:
        if self._form is not None and name:
            self._form.fields.setdefault(name, []).append(value)

    def handle_starttag(self, tag, attrs):
        attrs = {key: value or "" for key, value in attrs}
        if tag == "form":
            self._form = _Form(attrs)
            self.forms.append(self._form)
        elif tag in ("input", "button"):
            default = "on" if attrs.get("type") in ("checkbox", "radio") else ""
            self._add(attrs.get("name"), attrs.get("value", default))
        elif tag == "select":
            self._select = attrs.get("name")
        elif tag == "option" and self._form is not None:
            self._add(getattr(self, "_select", None), attrs.get("value", ""))
        elif tag == "textarea":
            self._textarea = attrs.get("name")
            self._add(self._textarea, "")

    def handle_data(self, data):
        if self._textarea and self._form is not None:
            self._form.fields[self._textarea][-1] += data

    def handle_endtag(self, tag):
        if tag == "form":
            self._form = None
        elif tag == "textarea":
            self._textarea = None
        elif tag == "select":
            self._select = None


def targets_of(page_path: str, html: str) -> set[Target]:
    parser = FormParser()
    parser.feed(html)
    found = set()
    for form in parser.forms:
        fields = tuple(sorted((name, tuple(values)) for name, values in form.fields.items()))
        method = form.attrs.get("method", "get").upper()
        sends = {(method, form.attrs.get("action", ""))}
        # An htmx form also sends its fields to its hx-get or hx-post, often elsewhere.
        sends |= {
            (m.upper(), form.attrs[f"hx-{m}"]) for m in ("get", "post") if f"hx-{m}" in form.attrs
        }
        for how, action in sends:
            url = urlsplit(urljoin(page_path, action))
            # A query string in the action is one more field (`?template=3`).
            extra = tuple(
                (k, (v,)) for k, _, v in (p.partition("=") for p in url.query.split("&") if p)
            )
            found.add(Target(how, url.path, tuple(sorted(fields + extra)), page_path))
    return found


def discover(world, role: str) -> list[Target]:
    """Every form on every page the role can open (pages and partials alike)."""
    client = client_for(world, role)
    found: set[Target] = set()
    for route in all_routes():
        path = fill(route, world)
        response = isolated(lambda path=path: client.get(path))
        if response.status_code == 200 and "html" in response.get("Content-Type", ""):
            found |= targets_of(path, response.content.decode())
    # One target per method, URL and field names: the same filter form on two pages is one.
    unique = {(t.method, t.url, tuple(name for name, _ in t.fields)): t for t in found}
    return sorted(unique.values(), key=str)


@pytest.fixture
def no_request_closes_the_test_connection():
    """Keep request signals from closing the test's connection (as Django's client does
    for its own requests, but a failed one inside hypothesis would lose the data)."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def field_values(target: Target):
    """Per field: a value the page offered, left out, or hostile."""
    return st.fixed_dictionaries(
        {
            name: st.one_of(st.sampled_from(offered), st.just(LEFT_OUT), HOSTILE)
            for name, offered in target.fields
        }
    )


def isolated(request):
    """Answer the request, then undo what it wrote: every example starts from the same
    world, and a failed query (which aborts a PostgreSQL transaction) spoils no other."""
    from django.db import transaction

    savepoint = transaction.savepoint()
    try:
        return request()
    finally:
        transaction.savepoint_rollback(savepoint)


def send(world, role: str, target: Target, values: dict[str, str | None]):
    client = client_for(world, role)
    body = form_body(values)
    if target.method == "POST":
        form = "application/x-www-form-urlencoded"
        return isolated(lambda: client.post(target.url, body, content_type=form))
    return isolated(lambda: client.get(f"{target.url}?{body}"))


def fuzz_target(world, role: str, target: Target) -> str | None:
    """None, or what answered a 5xx (hypothesis's smallest example)."""

    @FUZZ
    @given(values=field_values(target))
    def fuzz(values):
        response = send(world, role, target, values)
        shown = {name: value if value is None else value[:80] for name, value in values.items()}
        assert response.status_code < 500, f"{response.status_code} for {shown!r}"

    try:
        fuzz()
    except AssertionError as error:
        return f"{target} as {role}: {error}"
    return None


# ---------------------------------------------------------------- the tests


def test_the_form_finder_reads_the_forms_a_page_has():
    html = """<form method="post" action="/jobs/new" hx-post="/jobs/new/preview">
      <input name="job_name" value="x"><select name="partition"><option value="train">
      <option value="infer"></select><textarea name="command">srun</textarea>
      <button name="submit" value="1">Go</button></form>
      <form><input type="checkbox" name="mine"></form>"""

    found = {str(t): t for t in targets_of("/jobs/new", html)}

    assert set(found) == {
        "POST /jobs/new (form on /jobs/new)",
        "POST /jobs/new/preview (form on /jobs/new)",
        "GET /jobs/new (form on /jobs/new)",
    }
    assert dict(found["POST /jobs/new (form on /jobs/new)"].fields) == {
        "command": ("srun",),
        "job_name": ("x",),
        "partition": ("train", "infer"),
        "submit": ("1",),
    }


def test_every_page_form_is_found(world):
    admin = {(t.method, t.url) for t in discover(world, "admin")}
    researcher = {(t.method, t.url) for t in discover(world, "researcher")}

    assert {("POST", "/jobs/new"), ("POST", "/jobs/new/preview"), ("GET", "/")} <= researcher
    assert ("POST", f"/remediation/{world.remediation.pk}/approve/") in admin
    assert ("GET", "/remediation/replay/") in admin
    assert len(admin) > 15


@pytest.mark.parametrize("role", ROLES)
def test_no_form_answers_a_5xx_to_hostile_fields(
    world, role, no_request_closes_the_test_connection
):
    failures = [
        failure
        for target in discover(world, role)
        if (failure := fuzz_target(world, role, target)) is not None
    ]

    assert not failures, "\n".join(failures)


def path_routes():
    return [route for route in all_routes() if route.param_names()]


def fuzz_path(world, role: str, route, name: str) -> str | None:
    """None, or which value of the path parameter answered a 5xx."""

    @settings(FUZZ, max_examples=PATH_EXAMPLES)
    @given(value=HOSTILE, method=st.sampled_from(["GET", "POST"]))
    def fuzz(value, method):
        path = fill(route, world, raw={name: encoded(value)})
        client = client_for(world, role)
        response = isolated(lambda: getattr(client, method.lower())(path))
        assert response.status_code < 500, f"{method} {path[:200]}: {response.status_code}"

    try:
        fuzz()
    except AssertionError as error:
        return f"{route.key} <{name}> as {role}: {error}"
    return None


@pytest.mark.parametrize("role", ROLES)
def test_no_path_parameter_answers_a_5xx_to_hostile_values(
    world, role, no_request_closes_the_test_connection
):
    failures = [
        failure
        for route in path_routes()
        for name in route.param_names()
        if (failure := fuzz_path(world, role, route, name)) is not None
    ]

    assert not failures, "\n".join(failures)
