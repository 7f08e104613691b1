"""Lemon nodes and GPUs: known answers for the test, its false-positive bound, and the policy."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from reports.lemons import lemon_test
from reports.stats import binomial_sf, poisson_sf
from tests.reports.conftest import RANGE, at

pytestmark = pytest.mark.django_db
DAY_S = 24 * 3600


def test_the_poisson_tail_has_known_values():
    assert poisson_sf(3, 0.5) == pytest.approx(1 - math.exp(-0.5) * (1 + 0.5 + 0.125))
    assert poisson_sf(5, 5.0) == pytest.approx(0.5595067149347877)
    assert poisson_sf(0, 2.0) == 1.0
    assert poisson_sf(1, 0.0) == 0.0
    # Far in the tail it keeps its digits: 1/40! times e^-1 summed.
    assert poisson_sf(40, 1.0) == pytest.approx(math.exp(-1) / math.factorial(40), rel=0.03)


def test_the_binomial_tail_has_known_values():
    assert binomial_sf(2, 3, 0.5) == pytest.approx(0.5)
    assert binomial_sf(3, 3, 0.1) == pytest.approx(0.001)
    assert binomial_sf(0, 3, 0.1) == 1.0 and binomial_sf(4, 3, 0.1) == 0.0


def test_one_node_with_eight_faults_among_nineteen_with_one_is_a_lemon():
    counts = {f"gpu-{n:02d}": (1, DAY_S) for n in range(1, 20)}
    counts["gpu-20"] = (8, DAY_S)
    tested = lemon_test(counts)
    lemon = tested[0]
    assert lemon.name == "gpu-20" and lemon.lemon
    # 27 faults in 20 node-days: a twentieth of them, 1.35, is this node's share.
    assert lemon.expected == pytest.approx(1.35)
    exact = sum(math.comb(27, i) * 0.05**i * 0.95 ** (27 - i) for i in range(8, 28))
    assert lemon.p_value == pytest.approx(exact)
    assert [item.name for item in tested if item.lemon] == ["gpu-20"]


def test_a_fleet_of_equally_faulty_nodes_has_no_lemon_however_many_faults():
    assert not any(item.lemon for item in lemon_test({f"n{i}": (3, DAY_S) for i in range(50)}))


def test_a_node_in_service_longer_is_not_a_lemon_for_its_larger_count():
    counts = {f"n{i}": (1, DAY_S) for i in range(10)}
    counts["old"] = (6, 6 * DAY_S)  # the same rate over six times the hours
    assert not any(item.lemon for item in lemon_test(counts))


def test_the_false_positive_rate_stays_under_one_percent_on_simulated_healthy_fleets():
    import random

    rng = random.Random(18)
    flagged_reports = 0
    trials = 400
    for _ in range(trials):
        # 64 nodes, each with Poisson(2) faults: a healthy fleet.
        counts = {}
        for index in range(64):
            faults, limit, product = 0, math.exp(-2.0), rng.random()
            while product > limit:
                faults += 1
                product *= rng.random()
            counts[f"n{index}"] = (faults, DAY_S)
        flagged_reports += any(item.lemon for item in lemon_test(counts))
    assert flagged_reports / trials <= 0.01


def critical(node, hour, gpu=None):
    from health.models import Incident, Severity

    return Incident.objects.create(
        node=node,
        gpu_index=gpu,
        opened_at=at(hour),
        last_event_at=at(hour),
        severity=Severity.CRITICAL,
    )


@pytest.fixture
def fleet(history):
    nodes = {n: history.node(f"gpu-{n:02d}", [(0, "idle")]) for n in range(1, 11)}
    for n in range(1, 6):
        critical(nodes[n], 2 + n, gpu=0)
    for hour in (1, 3, 5, 7, 9, 11, 13):
        critical(nodes[9], hour, gpu=5)
    return nodes


def test_the_report_flags_the_node_and_the_gpu_that_fail_most(manager_client, fleet):
    body = manager_client.get("/api/v1/reports/lemons/", RANGE).json()
    nodes = body["tables"]["nodes"]["rows"]
    assert nodes[0]["node"] == "gpu-09" and nodes[0]["lemon"] == "yes"
    assert nodes[0]["failures"] == 7 and nodes[0]["in_service_h"] == 24.0
    # 12 faults over 10 node-days: its share is 1.2, and 7 or more has p = 4.6e-5.
    assert nodes[0]["expected"] == 1.2
    assert nodes[0]["p_value"] == pytest.approx(
        sum(math.comb(12, i) * 0.1**i * 0.9 ** (12 - i) for i in range(7, 13)), rel=1e-2
    )
    assert all(row["lemon"] == "no" for row in nodes[1:])
    gpus = body["tables"]["gpus"]["rows"]
    assert gpus[0]["gpu"] == "gpu-09 GPU 5" and gpus[0]["lemon"] == "yes"
    assert body["summary"]["lemon nodes"] == 1 and body["summary"]["lemon GPUs"] == 1


def test_the_report_page_explains_the_test_and_its_false_positive_rate(manager_client, fleet):
    html = manager_client.get("/reports/lemons/", RANGE).content.decode()
    assert "Bonferroni" in html and "HPCA 2025" in html and "gpu-09" in html


def test_the_command_queues_a_quarantine_of_each_lemon_for_approval_once(db, capsys):
    from clusters.models import Cluster, Node, NodeStateChange
    from health.models import Incident, Severity
    from remediation.models import Remediation
    from remediation.transitions import RunStatus

    cluster = Cluster.objects.create(name="lemons")
    now = timezone.now()
    nodes = []
    for n in range(1, 11):
        node = Node.objects.create(cluster=cluster, name=f"l-{n:02d}", gpu_count=8)
        NodeStateChange.objects.create(node=node, to_status="idle", at=now - timedelta(days=2))
        nodes.append(node)
    for hours in range(1, 7):
        opened = now - timedelta(hours=hours)
        Incident.objects.create(
            node=nodes[0], opened_at=opened, last_event_at=opened, severity=Severity.CRITICAL
        )
    call_command("lemon_nodes", "--days", "3", "--suggest")
    assert "l-01: 6 faults" in capsys.readouterr().out
    run = Remediation.objects.get(node=nodes[0])
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert run.planned_steps == ["quarantine"] and run.reason.startswith("lemon node")
    call_command("lemon_nodes", "--days", "3", "--suggest")
    assert "already has active run" in capsys.readouterr().out
    assert Remediation.objects.filter(node=nodes[0]).count() == 1


def test_each_node_and_gpu_links_to_its_nodes_page_with_its_history(manager_client, fleet):
    html = manager_client.get("/reports/lemons/", RANGE).content.decode()
    assert '<a href="/nodes/gpu-09/">gpu-09</a>' in html
    assert '<a href="/nodes/gpu-09/">gpu-09 GPU 5</a>' in html
    # The exports stay plain values.
    csv_text = manager_client.get("/api/v1/reports/lemons.csv", RANGE).content.decode()
    assert "<a" not in csv_text and "gpu-09" in csv_text
