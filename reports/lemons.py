"""Lemon nodes and GPUs: machines that fail far more often than the rest of the fleet.

Meta's "Revisiting Reliability in Large-Scale ML Research Clusters" (HPCA 2025)
found that a few "lemon" nodes cause a large share of job failures. Ranking by a
raw fault count would flag whichever nodes were in service longest, and a fixed
threshold would flag some healthy nodes in every large fleet by chance alone, so
each node is tested against the rest of the fleet:

- its faults k (its failures: critical incidents, as every report counts
  them) over its in-service hours e, among the
  fleet's T faults over E hours;
- if every node failed at the same rate, each of the T faults would have
  landed on this node with probability e / E, so k ~ Binomial(T, e / E) (the
  exact test conditional on T: it needs no estimate of the fleet's rate, so a
  lemon cannot raise the bar it is measured against), and its p-value is
  P(X >= k);
- a node is a lemon when p < ALPHA / N for the N nodes tested (Bonferroni): the
  chance that a report flags any node of a fleet whose nodes all fail at the
  same rate is at most ALPHA (1 %).

GPUs are tested the same way with critical incidents that name a GPU, each GPU
exposed for its node's in-service hours.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.urls import reverse

from reports import figures
from reports.base import NO_DATA, Report, Table, hours
from reports.capacity import node_hours
from reports.intervals import Span, node_label
from reports.params import ReportQuery
from reports.stats import binomial_sf

ALPHA = 0.01
PER_HOURS = 1000


@dataclass(frozen=True)
class Tested:
    """One machine's faults and exposure, and how unlikely they are for the fleet's rate."""

    name: str
    faults: int
    exposure_s: float
    expected: float
    p_value: float
    lemon: bool


def lemon_test(counts: dict[str, tuple[int, float]], alpha: float = ALPHA) -> list[Tested]:
    """Tests each machine (name -> (faults, in-service seconds)) against the fleet,
    most unlikely first."""
    exposed = {name: value for name, value in counts.items() if value[1] > 0}
    total_faults = sum(faults for faults, _ in exposed.values())
    total_exposure = sum(seconds for _, seconds in exposed.values())
    threshold = alpha / max(1, len(exposed))
    tested = []
    for name, (faults, seconds) in exposed.items():
        if seconds >= total_exposure:
            continue  # nothing to compare with
        share = seconds / total_exposure
        p_value = binomial_sf(faults, total_faults, share)
        tested.append(
            Tested(name, faults, seconds, total_faults * share, p_value, p_value < threshold)
        )
    tested.sort(key=lambda item: (item.p_value, -item.faults, item.name))
    return tested


def node_counts(span: Span) -> dict[str, tuple[int, float]]:
    failures = figures.failures_per_node(span)
    exposure = figures.in_service(node_hours(span))
    return {name: (failures.get(name, 0), seconds) for name, seconds in exposure.node_s.items()}


def gpu_counts(span: Span, nodes: dict[str, tuple[int, float]], gpus_per_node: dict) -> dict:
    found = figures.failures_per_gpu(span)
    counts = {}
    for name, (_, seconds) in nodes.items():
        for index in range(gpus_per_node.get(name, 0)):
            counts[f"{name} GPU {index}"] = (found.get((name, index), 0), seconds)
    return counts


def lemon_nodes(span: Span) -> list[Tested]:
    return lemon_test(node_counts(span))


def _table(name: str, title: str, tested: list[Tested], fleet_rate: float) -> Table:
    key = name.rstrip("s")
    table = Table(
        name,
        title,
        [(key, key), ("failures", "failures"),
         ("in_service_h", "in-service h"), ("rate_per_1000h", f"failures per {PER_HOURS} h"),
         ("fleet_rate_per_1000h", f"fleet's per {PER_HOURS} h"), ("expected", "expected"),
         ("p_value", "p-value"), ("lemon", "lemon")],
    )  # fmt: skip
    # Each lemon links to its node's page: its state history, incidents and runs.
    table.links[key] = lambda row: reverse("node-detail", args=[_node_name(row[key])])
    for item in tested:
        if not item.faults:
            continue
        table.rows.append(
            {
                key: item.name,
                "failures": item.faults,
                "in_service_h": hours(item.exposure_s),
                "rate_per_1000h": round(item.faults / item.exposure_s * 3600 * PER_HOURS, 2),
                "fleet_rate_per_1000h": round(fleet_rate * 3600 * PER_HOURS, 2),
                "expected": round(item.expected, 2),
                "p_value": float(f"{item.p_value:.3g}"),
                "lemon": "yes" if item.lemon else "no",
            }
        )
    return table


def _node_name(label: str) -> str:
    """The node's own name in a row's label ("a/gpu-01 GPU 3" -> "gpu-01")."""
    return label.split(" GPU ")[0].rsplit("/", 1)[-1]


def _fleet_rate(counts: dict[str, tuple[int, float]]) -> float:
    exposure = sum(seconds for _, seconds in counts.values())
    return sum(faults for faults, _ in counts.values()) / exposure if exposure else 0.0


def lemons(query: ReportQuery) -> Report:
    from clusters.models import Node

    span = query.span()
    nodes = node_counts(span)
    fleet = span.of_cluster(Node.objects, "cluster").annotate(label=node_label(span, ""))
    gpus_per_node = dict(fleet.values_list("label", "gpu_count"))
    gpus = gpu_counts(span, nodes, gpus_per_node)
    tested_nodes, tested_gpus = lemon_test(nodes), lemon_test(gpus)
    report = Report("lemons", "Lemon nodes and GPUs", query)
    report.tables = [
        _table(
            "nodes", "Nodes by how unlikely their failures are", tested_nodes, _fleet_rate(nodes)
        ),
        _table("gpus", "GPUs by how unlikely their failures are", tested_gpus, _fleet_rate(gpus)),
    ]
    report.summary = {
        "lemon nodes": sum(item.lemon for item in tested_nodes),
        "lemon GPUs": sum(item.lemon for item in tested_gpus),
        "nodes tested": len(tested_nodes),
        "false-positive rate": f"≤ {ALPHA:.0%}",
    }
    report.notes += [
        'A lemon fails far more often than the rest of the fleet (Meta, "Revisiting '
        'Reliability in Large-Scale ML Research Clusters", HPCA 2025).',
        "Test: if all nodes failed at one rate, each of the fleet's failures (critical "
        "incidents, as every report counts them) would land on a node in proportion to its "
        "in-service hours; p-value = the binomial chance of a node getting at least the "
        "failures it got "
        '("expected" is its proportional share). Lemon when p < '
        f"{ALPHA:g} / nodes tested (Bonferroni), so a fleet of equally reliable nodes has at "
        f"most a {ALPHA:.0%} chance of any node being flagged in a report. GPUs likewise, "
        "with critical incidents that name a GPU.",
        "`manage.py lemon_nodes --suggest` puts a quarantine of each lemon node in the "
        "approval queue.",
    ]
    if not nodes:
        report.message = NO_DATA
    return report
