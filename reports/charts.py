"""Plotly figures drawn on the server from a report's tables; the page only renders them."""

from __future__ import annotations

import html
import json
from collections import defaultdict

import plotly.graph_objects as go

from reports.base import Report, Table
from reports.reliability import REFERENCE_END_TO_END_MIN, REFERENCE_REPLACE_MIN

LAYOUT = {
    "margin": {"l": 60, "r": 20, "t": 70, "b": 40},
    "height": 320,
    "template": "plotly_white",
    # Above the plot, under the title: below it, the legend covered the axis labels.
    "legend": {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"},
    "separators": ".,",
}
PARTIAL = " (so far)"


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
    # Thousands separated, as the tables print them; "k" and "M" suffixes read as units.
    figure.update_yaxes(tickformat=",~f", hoverformat=",.1f", automargin=True)
    # Categories, never dates or numbers: a bucket marked "(so far)" is no date and would
    # be dropped from a date axis, and a job id or node number is a name, not a quantity.
    figure.update_xaxes(type="category", automargin=True)
    return figure


def _bucket_labels(report: Report, buckets: list[str]) -> list[str]:
    """Bucket labels with the one still in progress (today, this week) marked, so that a
    day that is not over does not read as a dip."""
    span = report.query.span()
    partial = {
        start.date().isoformat()
        for index, start in enumerate(span.bucket_starts())
        if span.start + (index + 1) * span.bucket > span.data_end
    }
    return [f"{bucket}{PARTIAL}" if bucket in partial else bucket for bucket in buckets]


def _series(table: Table, value: str, split: str | None = None) -> dict[str, tuple[list, list]]:
    """{series name: (x buckets, y values)} from a bucketed table."""
    series: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for row in table.rows:
        xs, ys = series[str(row.get(split, "")) if split else "all"]
        xs.append(row["bucket"])
        ys.append(row[value])
    return series


def _lines(report: Report, table: Table, value: str, title: str, axis: str) -> go.Figure:
    split = "group" if "group" in table.keys else None
    traces = (
        go.Scatter(
            x=_bucket_labels(report, xs),
            y=ys,
            mode="lines+markers",
            name=name if split else axis,
            showlegend=bool(split),
        )
        for name, (xs, ys) in _series(table, value, split).items()
    )
    return _figure(title, traces, yaxis={"title": axis, "rangemode": "tozero"})


def utilization(report: Report) -> list[go.Figure]:
    return [_lines(report, report.table(), "utilization_pct", "GPU utilization", "utilization %")]


def training_share(report: Report) -> list[go.Figure]:
    table = report.table()
    xs = _bucket_labels(report, [row["bucket"] for row in table.rows])
    traces = (
        go.Bar(x=xs, y=[row[f"{kind}_gpu_h"] for row in table.rows], name=kind)
        for kind in ("training", "inference", "spare")
    )
    return [_figure("GPU-hours by pool", traces, barmode="stack", yaxis={"title": "GPU-h"})]


def availability(report: Report) -> list[go.Figure]:
    downtime = report.table("downtime")
    bars = go.Bar(
        x=[row["node"] for row in downtime.rows],
        y=[row["downtime_h"] for row in downtime.rows],
        name="downtime",
    )
    return [
        _lines(report, report.table(), "availability_pct", "Availability", "availability %"),
        _figure(downtime.title, [bars], yaxis={"title": "downtime (h)"}, showlegend=False),
    ]


def reliability(report: Report) -> list[go.Figure]:
    faults = report.table("faults")
    per_source: dict[str, dict[str, int]] = defaultdict(dict)
    for row in faults.rows:
        per_source[row["source"]][row["bucket"]] = row["events"]
    stacked = (
        go.Bar(x=_bucket_labels(report, list(counts)), y=list(counts.values()), name=source)
        for source, counts in sorted(per_source.items())
    )
    mttr = report.table("mttr")
    repair = go.Bar(
        x=[row["action"] for row in mttr.rows], y=[row["mttr_min"] for row in mttr.rows],
        name="mean run time",
    )  # fmt: skip
    repair_figure = _figure(
        mttr.title, [repair], yaxis={"title": "minutes", "rangemode": "tozero"}, showlegend=False
    )
    for value, label in (
        (REFERENCE_REPLACE_MIN, "node replacement ~5 min"),
        (REFERENCE_END_TO_END_MIN, "end to end <15 min"),
    ):
        repair_figure.add_hline(y=value, line_dash="dash", annotation_text=label)
    return [
        _figure(faults.title, stacked, barmode="stack", yaxis={"title": "fault events"}),
        repair_figure,
    ]


def goodput(report: Report) -> list[go.Figure]:
    """Badput on its own scale: beside allocated time (99 % or more is kept) it is a
    sliver no one can see."""
    table = report.table()
    key = table.keys[0]
    names = [str(row[key]) or "(none)" for row in table.rows]
    lost = (
        go.Bar(x=names, y=[row[column] for row in table.rows], name=label)
        for column, label in (("lost_gpu_h", "lost work"), ("restore_gpu_h", "restore"))
    )
    kept = go.Bar(x=names, y=[row["goodput_pct"] for row in table.rows], name="goodput")
    return [
        _figure(f"Lost work and restore by {key}", lost, barmode="stack", yaxis={"title": "GPU-h"}),
        _figure(
            f"Goodput by {key}",
            [kept],
            yaxis={"title": "goodput %", "rangemode": "tozero"},
            showlegend=False,
        ),
    ]


def remediation(report: Report) -> list[go.Figure]:
    table = report.table("runs")
    actions = [row["action"] for row in table.rows]
    traces = (
        go.Bar(x=actions, y=[row[who] for row in table.rows], name=label)
        for who, label in (("automatic", "automatic"), ("admin", "asked by an admin"))
    )
    return [_figure("Runs by action and trigger", traces, barmode="stack", yaxis={"title": "runs"})]


def accounting(report: Report) -> list[go.Figure]:
    table = report.table()
    names = [str(row["group"]) or "(none)" for row in table.rows]
    traces = [go.Bar(x=names, y=[row["gpu_h"] for row in table.rows], name="GPU-h")]
    return [_figure(table.title, traces, yaxis={"title": "GPU-h"}, showlegend=False)]


def lemons(report: Report) -> list[go.Figure]:
    table = report.table("nodes")
    rows = table.rows[:20]
    names = [row["node"] for row in rows]
    traces = [
        go.Bar(x=names, y=[row["failures"] for row in rows], name="failures"),
        go.Bar(x=names, y=[row["expected"] for row in rows], name="expected at the fleet's rate"),
    ]
    return [_figure("Failures against the fleet's rate", traces, yaxis={"title": "failures"})]


def failures(report: Report) -> list[go.Figure]:
    table = report.table("by_xid")
    names = [row["xid"] for row in table.rows]
    traces = [
        go.Bar(x=names, y=[row["mtbf_h"] for row in table.rows], name="MTBF (GPU-h)"),
    ]
    return [_figure("MTBF by XID", traces, yaxis={"title": "MTBF (GPU-h)"}, showlegend=False)]


def ettr(report: Report) -> list[go.Figure]:
    """Badput by cause, without the productive time that would dwarf it."""
    table = report.table("by_account")
    names = [str(row["account"]) or "(none)" for row in table.rows]
    headings = dict(table.columns)
    causes = [key for key in table.keys if key.endswith("_gpu_h") and key != "productive_gpu_h"]
    traces = (
        go.Bar(
            x=names,
            y=[row[key] for row in table.rows],
            name=headings[key].removesuffix(" GPU-h"),
        )
        for key in causes
    )
    ratio = go.Bar(x=names, y=[row["ettr_pct"] for row in table.rows], name="ETTR")
    return [
        _figure("Badput by cause and account", traces, barmode="stack", yaxis={"title": "GPU-h"}),
        _figure("ETTR by account", [ratio], yaxis={"title": "ETTR %"}, showlegend=False),
    ]


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
