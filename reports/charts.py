"""Plotly figures drawn on the server from a report's tables; the page only renders them."""

from __future__ import annotations

import html
import json
from collections import defaultdict

import plotly.graph_objects as go

from reports.base import Report, Table
from reports.reliability import REFERENCE_END_TO_END_MIN, REFERENCE_REPLACE_MIN

LAYOUT = {
    "margin": {"l": 50, "r": 20, "t": 40, "b": 40},
    "height": 320,
    "template": "plotly_white",
    "legend": {"orientation": "h"},
}


def plain(value):
    """Plotly renders <a href>, <b> and entities in names and labels: escape them.

    Labels come from Slurm (accounts, users, node names), so a Slurm account
    holding `<a href=...>` became a live link inside the chart.
    """
    return html.escape(value, quote=False) if isinstance(value, str) else value


def _plain_trace(trace):
    trace.name = plain(trace.name)
    for axis in ("x", "y", "text"):
        values = getattr(trace, axis, None)
        if values is not None and not isinstance(values, str):
            setattr(trace, axis, [plain(v) for v in values])
    return trace


def _figure(title: str, traces, **layout) -> go.Figure:
    figure = go.Figure(data=[_plain_trace(trace) for trace in traces])
    figure.update_layout(title=plain(title), **LAYOUT, **layout)
    return figure


def _series(table: Table, value: str, split: str | None = None) -> dict[str, tuple[list, list]]:
    """{series name: (x buckets, y values)} from a bucketed table."""
    series: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for row in table.rows:
        xs, ys = series[str(row.get(split, "")) if split else "all"]
        xs.append(row["bucket"])
        ys.append(row[value])
    return series


def _lines(table: Table, value: str, title: str, axis: str) -> go.Figure:
    split = "group" if "group" in table.keys else None
    traces = (
        go.Scatter(x=xs, y=ys, mode="lines+markers", name=name or "(none)")
        for name, (xs, ys) in _series(table, value, split).items()
    )
    return _figure(title, traces, yaxis={"title": axis, "rangemode": "tozero"})


def utilization(report: Report) -> list[go.Figure]:
    return [_lines(report.table(), "utilization_pct", "GPU utilization", "%")]


def training_share(report: Report) -> list[go.Figure]:
    table = report.table()
    xs = [row["bucket"] for row in table.rows]
    traces = (
        go.Bar(x=xs, y=[row[f"{kind}_gpu_h"] for row in table.rows], name=kind)
        for kind in ("training", "inference", "spare")
    )
    return [_figure("GPU-hours by pool", traces, barmode="stack", yaxis={"title": "GPU-h"})]


def availability(report: Report) -> list[go.Figure]:
    downtime = report.table("downtime")
    bars = go.Bar(
        x=[row["node"] for row in downtime.rows], y=[row["downtime_h"] for row in downtime.rows]
    )
    return [
        _lines(report.table(), "availability_pct", "Availability", "%"),
        _figure(downtime.title, [bars], yaxis={"title": "hours"}),
    ]


def reliability(report: Report) -> list[go.Figure]:
    faults = report.table("faults")
    per_source: dict[str, dict[str, int]] = defaultdict(dict)
    for row in faults.rows:
        per_source[row["source"]][row["bucket"]] = row["events"]
    stacked = (
        go.Bar(x=list(counts), y=list(counts.values()), name=source)
        for source, counts in sorted(per_source.items())
    )
    mttr = report.table("mttr")
    repair = go.Bar(
        x=[row["action"] for row in mttr.rows], y=[row["mttr_min"] for row in mttr.rows],
        name="mean time to repair",
    )  # fmt: skip
    repair_figure = _figure(mttr.title, [repair], yaxis={"title": "minutes", "rangemode": "tozero"})
    for value, label in (
        (REFERENCE_REPLACE_MIN, "node replacement ~5 min"),
        (REFERENCE_END_TO_END_MIN, "end to end <15 min"),
    ):
        repair_figure.add_hline(y=value, line_dash="dash", annotation_text=label)
    return [
        _figure(faults.title, stacked, barmode="stack", yaxis={"title": "events"}),
        repair_figure,
    ]


def goodput(report: Report) -> list[go.Figure]:
    table = report.table()
    key = table.keys[0]
    names = [str(row[key]) or "(none)" for row in table.rows]
    traces = (
        go.Bar(x=names, y=[row[column] for row in table.rows], name=label)
        for column, label in (
            ("productive_gpu_h", "productive"),
            ("lost_gpu_h", "lost since checkpoint"),
            ("recovery_gpu_h", "recovery"),
        )
    )
    return [_figure(table.title, traces, barmode="stack", yaxis={"title": "GPU-h"})]


def remediation(report: Report) -> list[go.Figure]:
    table = report.table("runs")
    actions = [row["action"] for row in table.rows]
    traces = (
        go.Bar(x=actions, y=[row[who] for row in table.rows], name=who)
        for who in ("automatic", "admin")
    )
    return [_figure("Runs by action and trigger", traces, barmode="stack")]


def accounting(report: Report) -> list[go.Figure]:
    table = report.table()
    names = [str(row["group"]) or "(none)" for row in table.rows]
    traces = [go.Bar(x=names, y=[row["gpu_h"] for row in table.rows], name="GPU-h")]
    return [_figure(table.title, traces, yaxis={"title": "GPU-h"})]


def lemons(report: Report) -> list[go.Figure]:
    table = report.table("nodes")
    rows = table.rows[:20]
    names = [row["node"] for row in rows]
    traces = [
        go.Bar(x=names, y=[row["faults"] for row in rows], name="faults"),
        go.Bar(x=names, y=[row["expected"] for row in rows], name="expected at the fleet's rate"),
    ]
    return [_figure("Faults against the fleet's rate", traces, yaxis={"title": "faults"})]


def failures(report: Report) -> list[go.Figure]:
    table = report.table("by_xid")
    names = [row["xid"] for row in table.rows]
    traces = [
        go.Bar(x=names, y=[row["mtbf_h"] for row in table.rows], name="MTBF (GPU-h)"),
    ]
    return [_figure("MTBF by XID", traces, yaxis={"title": "GPU-hours"})]


def ettr(report: Report) -> list[go.Figure]:
    table = report.table("by_account")
    names = [str(row["account"]) or "(none)" for row in table.rows]
    causes = [key for key in table.keys if key.endswith("_gpu_h")]
    traces = (
        go.Bar(x=names, y=[row[key] for row in table.rows], name=dict(table.columns)[key])
        for key in causes
    )
    return [_figure("Productive and lost GPU-hours by account", traces, barmode="stack")]


BUILDERS = {
    "utilization": utilization,
    "training_share": training_share,
    "availability": availability,
    "reliability": reliability,
    "goodput": goodput,
    "remediation": remediation,
    "accounting": accounting,
    "lemons": lemons,
    "failures": failures,
    "ettr": ettr,
}


def figures(report: Report) -> list[dict]:
    """The report's figures as plain JSON-ready dicts (`fig.to_json()` parsed back)."""
    return [json.loads(figure.to_json()) for figure in BUILDERS[report.name](report)]
