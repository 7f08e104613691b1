"""With MEDBAY_GRAFANA_URL set, node and run pages link to the Medbay dashboard,
filtered to the node or to the run's time window; without it they do not link."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape
from urllib.parse import parse_qs, urlsplit

from django.test import Client
from django.utils import timezone

from clusters.models import Node
from remediation.models import Remediation


def grafana_link(response) -> str | None:
    found = re.search(r'id="grafana-link" href="([^"]+)"', response.content.decode())
    return unescape(found.group(1)) if found else None


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_node_page_links_to_the_dashboard_filtered_to_the_node(synced, researcher, settings):
    settings.MEDBAY_GRAFANA_URL = "https://grafana.example.org/g"

    response = logged_in(researcher).get("/nodes/gpu-02/", follow=True)

    link = urlsplit(grafana_link(response))
    assert (link.scheme, link.netloc, link.path) == (
        "https",
        "grafana.example.org",
        "/g/d/medbay/medbay",
    )
    assert parse_qs(link.query) == {"var-cluster": ["test"], "var-node": ["gpu-02"]}


def test_a_run_page_links_to_the_dashboard_over_the_runs_time_window(synced, admin_user, settings):
    settings.MEDBAY_GRAFANA_URL = "https://grafana.example.org"
    started = timezone.now() - timedelta(hours=2)
    run = Remediation.objects.create(
        node=Node.objects.get(name="gpu-03"),
        action="drain",
        trigger="admin",
        reason="test",
        status="succeeded",
        created_at=started,
        finished_at=started + timedelta(minutes=30),
    )

    link = urlsplit(grafana_link(logged_in(admin_user).get(f"/remediation/{run.pk}/")))

    query = parse_qs(link.query)
    assert link.path == "/d/medbay/medbay"
    assert query["var-node"] == ["gpu-03"]
    assert int(query["from"][0]) == round((started - timedelta(minutes=15)).timestamp() * 1000)
    assert int(query["to"][0]) == round((started + timedelta(minutes=45)).timestamp() * 1000)


def test_an_active_run_window_ends_now(synced, admin_user, settings):
    settings.MEDBAY_GRAFANA_URL = "https://grafana.example.org"
    run = Remediation.objects.create(
        node=Node.objects.get(name="gpu-03"), action="drain", trigger="admin", reason="test"
    )

    link = urlsplit(grafana_link(logged_in(admin_user).get(f"/remediation/{run.pk}/")))

    assert parse_qs(link.query)["to"] == ["now"]


def test_without_a_grafana_address_no_page_links_out(synced, admin_user, settings):
    settings.MEDBAY_GRAFANA_URL = ""
    run = Remediation.objects.create(
        node=Node.objects.get(name="gpu-03"), action="drain", trigger="admin", reason="test"
    )

    assert grafana_link(logged_in(admin_user).get("/nodes/gpu-03/", follow=True)) is None
    assert grafana_link(logged_in(admin_user).get(f"/remediation/{run.pk}/")) is None
