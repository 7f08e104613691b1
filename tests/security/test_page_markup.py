"""Every page, as an admin sees it, is well-formed where a person would notice: no
element id used twice (htmx swaps and live updates find elements by id, and a form
repeated by a template slip is posted twice as often), a <title> of plain text, and no
template comment shown as text (Django's {# #} spans one line only)."""

from __future__ import annotations

from collections import Counter
from html.parser import HTMLParser

from tests.security.conftest import client_for
from tests.security.routes import all_routes, fill

PAGES = [route for route in all_routes() if not route.is_api]


class Markup(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: Counter[str] = Counter()
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        self._in_title = tag == "title"
        for name, value in attrs:
            if name == "id" and value:
                self.ids[value] += 1

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False

    def handle_data(self, data):
        if self._in_title:
            self.title += data


def test_every_page_uses_each_id_once_and_has_a_plain_title(world):
    client = client_for(world, "admin")
    checked, wrong = 0, []
    for route in PAGES:
        path = fill(route, world)
        response = client.get(path)
        html = response.content.decode(errors="replace")
        if response.status_code != 200 or "<html" not in html[:500].lower():
            continue  # a redirect, a POST-only action or a fragment: not a page
        markup = Markup()
        markup.feed(html)
        checked += 1
        repeated = sorted(name for name, count in markup.ids.items() if count > 1)
        if repeated:
            wrong.append(f"{path}: ids used more than once: {repeated}")
        if "{#" in html or "#}" in html:
            wrong.append(f"{path}: a template comment is shown as text")
        if "<" in markup.title or not markup.title.strip():
            wrong.append(f"{path}: title is not plain text: {markup.title[:80]!r}")
    assert checked >= 25, f"only {checked} pages rendered; the route table changed?"
    assert wrong == []
