"""The Capacity page's and a demand run's charts: plotly figures drawn on the server, as
the reports' are (reports/charts.py), and drawn in the page by static/js/reports.js."""

from __future__ import annotations

import html
import json
from datetime import datetime, timedelta

import plotly.graph_objects as go

from clusters.models import Cluster
from demand import history
from demand.models import Metric

LAYOUT = {
    "margin": {"l": 60, "r": 20, "t": 70, "b": 40},
    "height": 300,
    "template": "plotly_white",
    "legend": {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"},
}
SMALL = {**LAYOUT, "height": 220, "margin": {"l": 50, "r": 10, "t": 50, "b": 30}}


def _figure(title: str, traces, layout=LAYOUT, **extra) -> dict:
    figure = go.Figure(data=list(traces))
    figure.update_layout(title=html.escape(title, quote=False), **layout, **extra)
    return json.loads(figure.to_json())


def _lines(found: dict[str, list], label=lambda scope: scope or "all") -> list[go.Scatter]:
    return [
        go.Scatter(
            x=[at.isoformat() for at, _ in points],
            y=[round(value, 2) for _, value in points],
            mode="lines",
            name=html.escape(label(scope), quote=False),
        )
        for scope, points in sorted(found.items())
    ]


def pool_sizes(cluster: Cluster, start: datetime, end: datetime) -> dict:
    found = history.series(cluster, Metric.POOL_NODES, start, end)
    return _figure(
        "Nodes in each pool", _lines(found), yaxis={"title": "nodes", "rangemode": "tozero"}
    )


def inference_load(cluster: Cluster, start, end, target: float | None = None) -> dict:
    found = history.series(cluster, Metric.INFERENCE_LOAD, start, end)
    figure = go.Figure(data=_lines(found, lambda scope: "inference load"))
    if target is not None:
        figure.add_hline(y=target, line_dash="dash", annotation_text=f"target {target:g}")
    figure.update_layout(title="Inference load", **LAYOUT, yaxis={"rangemode": "tozero"})
    return json.loads(figure.to_json())


def training_queue(cluster: Cluster, start, end) -> dict:
    nodes = history.series(cluster, Metric.TRAINING_PENDING_NODES, start, end)
    waits = history.series(cluster, Metric.TRAINING_LONGEST_WAIT_S, start, end)
    traces = _lines(nodes, lambda scope: f"nodes requested ({scope})")
    traces += [
        go.Scatter(
            x=[at.isoformat() for at, _ in points],
            y=[round(value / 60, 1) for _, value in points],
            mode="lines",
            yaxis="y2",
            name=html.escape(f"longest wait, min ({scope})", quote=False),
        )
        for scope, points in sorted(waits.items())
    ]
    return _figure(
        "Training queue",
        traces,
        yaxis={"title": "nodes", "rangemode": "tozero"},
        yaxis2={"title": "minutes", "overlaying": "y", "side": "right", "rangemode": "tozero"},
    )


def run_evidence(cluster: Cluster, demand: dict) -> dict | None:
    """The signal a demand run was decided on, over the hour before the decision: the
    inference load against its target, or the training queue's wait."""
    try:
        decided = datetime.fromisoformat(demand.get("decided_at", ""))
    except ValueError:
        return None
    start, end = decided - timedelta(hours=1), decided + timedelta(seconds=1)
    evidence = demand.get("evidence") or {}
    if str(demand.get("rule", "")).startswith("inference"):
        figure = inference_load(cluster, start, end, evidence.get("inference_target"))
    else:
        figure = training_queue(cluster, start, end)
    figure["layout"].update(SMALL)
    return figure
