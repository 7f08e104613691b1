"""The policy pages, the Capacity page and its what-if, and demand evidence on runs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import F
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from clusters.backends.base import JobSubmission
from clusters.models import NodePool
from demand.models import DemandSample, ReallocationPolicy, ReallocationPolicyChange
from demand.periodic import tick
from remediation.models import Remediation, Trigger
from tests.demand.test_deciding import FOUR_NODES, ONE_NODE, QUIET

pytestmark = pytest.mark.django_db


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def form_values(cluster, **changes) -> dict:
    values = {
        "training_pool": NodePool.objects.get(cluster=cluster, kind="training").pk,
        "inference_pool": NodePool.objects.get(cluster=cluster, kind="inference").pk,
        "mode": "approval",
        "training_min_nodes": 0,
        "inference_min_nodes": 1,
        "inference_unit": "latency_ms",
        "inference_target": 300,
        "training_max_wait_s": 900,
        "hysteresis_s": 600,
        "cooldown_s": 3600,
        "max_moves_per_hour": 4,
        "stale_after_s": 300,
        "signals": ["training", "inference_load"],
    }
    values.update(changes)
    return {key: value for key, value in values.items() if value is not None}


def test_an_admin_creates_a_policy_off_by_default_and_its_creation_is_in_the_history(
    admin_user, cluster, demand_sim
):
    client = logged_in(admin_user)
    url = reverse("demand-policy-new") + f"?cluster={cluster.name}"

    response = client.post(url, form_values(cluster))

    assert response.status_code == 302
    policy = ReallocationPolicy.objects.get()
    assert policy.enabled is False
    (change,) = ReallocationPolicyChange.objects.all()
    assert change.before == {} and change.changed_by == admin_user
    page = client.get(reverse("demand-policy-edit", args=[policy.pk])).content.decode()
    assert "Off: it decides nothing." in page
    assert "created:" in page


def test_min_over_max_and_an_impossible_target_are_refused_at_once_each_under_its_field(
    admin_user, cluster, demand_sim
):
    client = logged_in(admin_user)
    url = reverse("demand-policy-new") + f"?cluster={cluster.name}"
    values = form_values(cluster, training_min_nodes=5, training_max_nodes=2, inference_target=-3)

    response = client.post(url, values)

    assert response.status_code == 400
    errors = response.context["form"].errors
    assert "exceeds the training maximum of 2 nodes" in errors["training_min_nodes"][0]
    assert "inference_target" in errors
    assert not ReallocationPolicy.objects.exists()


def test_a_change_is_recorded_with_what_it_was_before(admin_user, cluster, make_policy):
    policy = make_policy(enabled=False)
    client = logged_in(admin_user)

    client.post(
        reverse("demand-policy-edit", args=[policy.pk]),
        form_values(cluster, enabled="on", max_moves_per_hour=2),
    )

    latest = policy.changes.first()
    changed = {name: (was, now) for name, was, now in latest.changed_fields()}
    assert changed["enabled"] == (False, True)
    assert changed["max_moves_per_hour"] == (64, 2)


@pytest.fixture
def proposal(demand_sim, cluster, make_policy, resync):
    """A to_training proposal of an approval policy, decided on recorded samples."""
    demand_sim.demand_mode(QUIET)
    policy = make_policy()
    demand_sim.submit_job(JobSubmission(script=FOUR_NODES, user="alice"))
    resync(timedelta(seconds=1))
    demand_sim.submit_job(JobSubmission(script=ONE_NODE, user="bob"))
    resync(timedelta(minutes=10))
    tick(cluster, demand_sim, demand_sim, now=demand_sim.now)
    return policy, Remediation.objects.get(trigger=Trigger.DEMAND)


def test_the_approval_card_and_the_run_page_show_the_sentence_and_a_chart(admin_user, proposal):
    _, run = proposal
    sentence = run.context["demand"]["sentence"]
    client = logged_in(admin_user)

    card = client.get(reverse("remediation-approvals")).content.decode()
    page = client.get(reverse("remediation-detail", args=[run.pk])).content.decode()

    for html in (card, page):
        assert f'id="demand-evidence-{run.pk}"' in html
        assert escape(sentence.split(";")[0]) in html
        assert f'id="figure-data-run-{run.pk}"' in html
        assert "plotly-basic" in html


def test_the_capacity_page_shows_pools_signals_decisions_and_the_policys_verdict(
    admin_user, manager, proposal
):
    policy, run = proposal

    admin_page = logged_in(admin_user).get(reverse("capacity")).content.decode()
    manager_page = logged_in(manager).get(reverse("capacity")).content.decode()

    for figure in ("figure-data-pools", "figure-data-load", "figure-data-training"):
        assert figure in admin_page and figure in manager_page
    assert f"run {run.pk}" in admin_page
    assert "capacity-decisions" not in manager_page  # decisions and what-if are admins'
    assert "GPU-hours by pool per day" in manager_page


def test_what_if_replays_the_recorded_signals_and_lists_the_moves(admin_user, proposal):
    policy, _ = proposal
    # The simulator's clock ran ten minutes ahead of ours: the record is from the past.
    DemandSample.objects.update(sampled_at=F("sampled_at") - timedelta(minutes=30))

    response = logged_in(admin_user).get(reverse("capacity-what-if", args=[policy.pk]) + "?days=1")

    assert response.status_code == 200
    result = response.context["result"]
    assert result.frames >= 1
    assert [m.move.direction for m in result.moves][:1] == ["to_training"]


def test_an_unknown_cluster_on_the_capacity_page_is_a_404_not_a_500(admin_user, cluster):
    response = logged_in(admin_user).get(reverse("capacity") + "?cluster=nope")

    assert response.status_code == 404
