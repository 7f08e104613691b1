"""Capacity reports: GPU utilization, training vs inference share, availability.

All three are sums of node or job intervals per bucket (see `intervals.py`);
the group dimension is computed in SQL and only tidied up here.
"""

from __future__ import annotations

from django.db.models import F, Value
from django.db.models.functions import Coalesce

from clusters.models import NodePool
from clusters.status import POOL_FOR_PARTITION
from reports import figures
from reports.base import (
    NO_DATA,
    OUT_OF_SERVICE,
    Report,
    Table,
    hours,
    percent,
    sql_list,
)
from reports.intervals import (
    Span,
    bucketed_and_per_node,
    bucketed_sums,
    node_label,
    node_state_intervals,
    summed,
)
from reports.params import ReportQuery
from reports.rollups import (
    falls_per_node,
    fleet_seconds,
    job_sources,
    node_sources,
    node_totals,
)

TOP = 10
NODE_GROUPS = {"partition": "node__partition_names", "pool": "node__pool__kind"}
JOB_GROUPS = {"partition": "partition", "pool": "partition", "account": "account", "user": "user"}


# ------------------------------------------------------------------ shared sums
def node_seconds(span: Span, group: str) -> dict[tuple[str, str], list[float]]:
    """GPU-seconds per bucket for each (group, node status)."""
    raw, edge = node_sources(span)
    sums = bucketed_sums(
        node_state_intervals(raw).annotate(g=_node_key(group)), span, ["g", "status"]
    )
    return _merge_groups(_with(sums, fleet_seconds(span, edge, group)), group)


def node_seconds_and_hours(span: Span, group: str) -> tuple[dict, list[dict]]:
    """`node_seconds` and `node_hours` (every node, most downtime first) from one scan."""
    raw, edge = node_sources(span)
    rows = node_state_intervals(raw).annotate(g=_node_key(group), node_name=node_label(span))
    sums, nodes = bucketed_and_per_node(rows, span, ["g", "status"], _node_sums())
    nodes = _ranked(_with_totals(nodes, node_totals(span, edge)))
    return _merge_groups(_with(sums, fleet_seconds(span, edge, group)), group), nodes


def _with(sums: dict, more: dict) -> dict:
    for key, values in more.items():
        _add(sums, key, values)
    return sums


def _with_totals(nodes: list[dict], totals: dict[str, dict]) -> list[dict]:
    """Per-node sums from raw rows plus those over the rolled-up days (node_totals)."""
    merged = {row["node_name"]: dict(row) for row in nodes}
    for name, entry in totals.items():
        row = merged.setdefault(
            name, {"node_name": name, "down_s": 0.0, "installed_s": 0.0, "gpu_up_s": 0.0}
        )
        for key in ("down_s", "installed_s", "gpu_up_s"):
            row[key] = (row[key] or 0.0) + entry[key]
    return [row for row in merged.values() if row["installed_s"] > 0]


def _ranked(nodes: list[dict], limit: int | None = None) -> list[dict]:
    nodes.sort(key=lambda row: (-(row["down_s"] or 0.0), row["node_name"]))
    return nodes if limit is None else nodes[:limit]


def _node_key(group: str):
    field = NODE_GROUPS.get(group)
    return Coalesce(F(field), Value("")) if field else Value("")


def _merge_groups(sums: dict, group: str) -> dict[tuple[str, str], list[float]]:
    merged: dict[tuple[str, str], list[float]] = {}
    for (name, status), values in sums.items():
        # A node in several partitions is reported under its first one.
        name = (name or "").split(",")[0] if group == "partition" else name or ""
        _add(merged, (name, status), values)
    return merged


def job_seconds(span: Span, group: str) -> dict[str, list[float]]:
    """Allocated GPU-seconds per bucket for each group (partition, pool, account or user)."""
    field = JOB_GROUPS.get(group)
    merged: dict[str, list[float]] = {}
    for rows, prefix in job_sources(span):
        key = Coalesce(F(prefix + field), Value("")) if field else Value("")
        sums = bucketed_sums(
            rows.annotate(g=key), span, ["g"], "run_state = 'RUNNING'", ["run_state"]
        )
        for (name,), values in sums.items():
            _add(merged, name or "", values)
    if group == "pool":
        pools = pool_of_partition(span)
        regrouped: dict[str, list[float]] = {}
        for name, values in merged.items():
            _add(regrouped, pools.get(name, name), values)
        return regrouped
    return merged


def pool_of_partition(span: Span) -> dict[str, str]:
    pools = {name: str(kind) for name, kind in POOL_FOR_PARTITION.items()}
    pools.update(
        span.of_cluster(NodePool.objects, "cluster")
        .filter(partition__isnull=False)
        .values_list("partition__name", "kind")
    )
    return pools


def _add(target: dict, key, values: list[float]) -> None:
    if key in target:
        target[key] = [a + b for a, b in zip(target[key], values, strict=True)]
    else:
        target[key] = list(values)


def _label(span: Span, index: int) -> str:
    return span.bucket_starts()[index].date().isoformat()


def _group_column(query: ReportQuery) -> list[tuple[str, str]]:
    return [("group", query.group)] if query.group else []


# ------------------------------------------------------------------ utilization
def utilization(query: ReportQuery) -> Report:
    span = query.span()
    by_node = query.group in NODE_GROUPS
    nodes = node_seconds(span, query.group if by_node else "")
    jobs = job_seconds(span, query.group)
    available: dict[str, list[float]] = {}
    for (name, status), values in nodes.items():
        if status not in OUT_OF_SERVICE:
            _add(available, name, values)
    zeros = [0.0] * span.count
    report = Report("utilization", "GPU utilization", query)
    table = Table(
        "utilization",
        "Allocated vs available GPU-hours",
        [("bucket", query.bucket), *_group_column(query), ("allocated_gpu_h", "allocated GPU-h"),
         ("available_gpu_h", "available GPU-h"), ("utilization_pct", "utilization %")],
    )  # fmt: skip
    groups = sorted(set(jobs) | (set(available) if by_node else set())) or [""]
    for index in range(span.count):
        for name in groups:
            # Accounts and users own no nodes: their share is of the whole fleet.
            free = (available.get(name, zeros) if by_node else available.get("", zeros))[index]
            used = jobs.get(name, zeros)[index]
            row = {"bucket": _label(span, index)}
            if query.group:
                row["group"] = name
            row.update(
                allocated_gpu_h=hours(used),
                available_gpu_h=hours(free),
                utilization_pct=percent(used, free),
            )
            table.rows.append(row)
    total_used = sum(sum(values) for values in jobs.values())
    total_free = sum(sum(values) for values in available.values())
    report.summary = {
        "allocated_gpu_h": hours(total_used),
        "available_gpu_h": hours(total_free),
        "utilization_pct": percent(total_used, total_free),
    }
    report.tables.append(table)
    report.notes.append(
        "Available GPU-hours count nodes in service: not down, failed, drained or replacing."
    )
    if query.group and query.group not in JOB_GROUPS:
        report.notes.append(
            f"Medbay's own job records carry no {query.group}, so this table is not split by it; "
            "the Accounting report splits Slurm's accounting by it."
        )
    if not total_used and not total_free:
        report.message = NO_DATA
    return report


# ------------------------------------------------------------------ training share
def _pool_at(status: str, pool: str) -> str:
    # History records inference and spare as statuses; a busy or idle node is
    # training. Otherwise (down, drained...) fall back to the node's current pool.
    if status in ("inference", "spare"):
        return status
    if status in ("idle", "allocated", "mixed"):
        return "training"
    return pool or "training"


def training_share(query: ReportQuery) -> Report:
    span = query.span()
    kinds = ("training", "inference", "spare")
    per_kind: dict[str, list[float]] = {kind: [0.0] * span.count for kind in kinds}
    for (pool, status), values in node_seconds(span, "pool").items():
        _add(per_kind, _pool_at(status, pool), values)
    table = Table(
        "training_share",
        "GPU-hours by pool",
        [("bucket", query.bucket)]
        + [(f"{kind}_gpu_h", f"{kind} GPU-h") for kind in kinds]
        + [(f"{kind}_pct", f"{kind} %") for kind in kinds],
    )
    for index in range(span.count):
        total = sum(per_kind[kind][index] for kind in kinds)
        row = {"bucket": _label(span, index)}
        row.update({f"{kind}_gpu_h": hours(per_kind[kind][index]) for kind in kinds})
        row.update({f"{kind}_pct": percent(per_kind[kind][index], total) for kind in kinds})
        table.rows.append(row)
    totals = {kind: sum(values) for kind, values in per_kind.items()}
    installed = sum(totals.values())
    report = Report("training_share", "Training vs inference", query, tables=[table])
    report.summary = {f"{kind}_pct": percent(totals[kind], installed) for kind in kinds}
    report.notes.append(
        "A node counts as inference or spare while its status says so, as training while "
        "idle, allocated or mixed, and under its current pool while down or drained."
    )
    if not installed:
        report.message = NO_DATA
    return report


# ------------------------------------------------------------------ availability
def availability(query: ReportQuery) -> Report:
    span = query.span()
    group = query.group if query.group in NODE_GROUPS else ""
    installed: dict[str, list[float]] = {}
    healthy: dict[str, list[float]] = {}
    seconds, per_node = node_seconds_and_hours(span, group)
    for (name, status), values in seconds.items():
        _add(installed, name, values)
        if status not in OUT_OF_SERVICE:
            _add(healthy, name, values)
    zeros = [0.0] * span.count
    table = Table(
        "availability",
        "Healthy vs installed GPU-hours",
        [("bucket", query.bucket), *_group_column(query), ("installed_gpu_h", "installed GPU-h"),
         ("healthy_gpu_h", "healthy GPU-h"), ("availability_pct", "availability %")],
    )  # fmt: skip
    for index in range(span.count):
        for name in sorted(installed) or [""]:
            row = {"bucket": _label(span, index)}
            if query.group:
                row["group"] = name
            whole, good = installed.get(name, zeros)[index], healthy.get(name, zeros)[index]
            row.update(
                installed_gpu_h=hours(whole),
                healthy_gpu_h=hours(good),
                availability_pct=percent(good, whole),
            )
            table.rows.append(row)
    total = sum(sum(values) for values in installed.values())
    good = sum(sum(values) for values in healthy.values())
    report = Report("availability", "Availability", query, tables=[table])
    report.summary = {
        "installed_gpu_h": hours(total),
        "healthy_gpu_h": hours(good),
        "availability_pct": percent(good, total),
    }
    report.tables += [downtime_table(span, per_node[:TOP]), fault_table(span)]
    if query.group and not group:
        report.notes.append(f"Availability is per node; grouping by {query.group} is ignored.")
    if not total:
        report.message = NO_DATA
    return report


def node_hours(span: Span, *, limit: int | None = None) -> list[dict]:
    """Per node: seconds down (out of service) and installed, most downtime first."""
    raw, edge = node_sources(span)
    rows = node_state_intervals(raw).annotate(node_name=node_label(span))
    nodes = summed(
        rows,
        ["node_name", "status", "w", "s_off", "e_off"],
        ["node_name"],
        _node_sums(),
        where="e_off > s_off",
    )
    return _ranked(_with_totals(nodes, node_totals(span, edge)), limit)


def _node_sums() -> dict[str, str]:
    down = f"CASE WHEN status IN {sql_list(OUT_OF_SERVICE)} THEN e_off - s_off ELSE 0 END"
    return {
        "down_s": f"SUM({down})",
        "installed_s": "SUM(e_off - s_off)",
        "gpu_up_s": f"SUM(w * (e_off - s_off) - w * ({down}))",
    }


def downtime_table(span: Span, top: list[dict] | None = None) -> Table:
    """The nodes with most downtime; `top` when the caller already has `node_hours`' rows."""
    table = Table(
        "downtime",
        f"Top {TOP} nodes by downtime",
        [("node", "node"), ("downtime_h", "downtime h"), ("availability_pct", "availability %")],
    )
    for row in node_hours(span, limit=TOP) if top is None else top:
        if not row["down_s"]:
            break
        up = row["installed_s"] - row["down_s"]
        table.rows.append(
            {
                "node": row["node_name"],
                "downtime_h": hours(row["down_s"]),
                "availability_pct": percent(up, row["installed_s"]),
            }
        )
    return table


def fault_table(span: Span) -> Table:
    table = Table(
        "faults",
        f"Top {TOP} nodes by failures",
        [("node", "node"), ("failures", "failures"), ("down_fail", "down/fail transitions")],
    )  # fmt: skip
    failures = figures.failures_per_node(span)
    falls = falls_per_node(span)
    names = set(failures) | set(falls)
    ranked = sorted(names, key=lambda name: (-failures.get(name, 0), -falls.get(name, 0), name))
    for name in ranked[:TOP]:
        table.rows.append(
            {"node": name, "failures": failures.get(name, 0), "down_fail": falls.get(name, 0)}
        )
    return table
