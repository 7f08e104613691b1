"""What every report returns: summary figures and tables (the charts are drawn from them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from reports.params import ReportQuery

NO_DATA = "No history in this range yet; the figures below are zero."

# Node statuses in which a node's GPUs are out of service (not available to run work).
OUT_OF_SERVICE = ("down", "fail", "drained", "replacing")
# A node entering one of these counts as a fault when no agent reported one.
FAULT_STATUSES = ("down", "fail")


# What a summary key means, as every tab that shows the figure heads it (reports/figures.py).
LABELS = {
    "fault_events": "fault events",
    "failures": "failures",
    "node_mtbf_h": "MTBF per node (node-h)",
    "gpu_mtbf_h": "MTBF per GPU (GPU-h)",
    "mttr_min": "MTTR (min)",
    "repairs": "repairs",
    "automatic_pct": "recovered without a human %",
    "lost_gpu_h": "lost work GPU-h",
    "restore_gpu_h": "restore GPU-h",
    "unknown_interruptions": "interruptions, loss unknown",
    "cluster_ettr_pct": "cluster ETTR %",
    "node_replacement_gpu_h": "node replacement GPU-h",
    "queue_after_requeue_gpu_h": "queue after requeue GPU-h",
}

# Columns of numbers that name something (a Slurm job id) rather than count it.
IDENTIFIERS = frozenset({"job", "slurm_id"})


def formatted(value):
    """A number as the page prints it: 175934.7 -> "175,934.7", 12000 -> "12,000".

    One decimal, always, so a column lines up; a small non-zero value (a p-value)
    keeps two significant digits rather than printing as 0.0. Text and None (the
    page shows a dash) pass through. The JSON and CSV keep the plain number.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if isinstance(value, int):
        return f"{value:,}"
    if value and abs(value) < 0.05:
        return f"{value:.2g}"
    return f"{value:,.1f}"


@dataclass
class Table:
    """Rows of plain values; the HTML table, the JSON and the CSV all print these."""

    name: str
    title: str
    columns: list[tuple[str, str]]  # (key, heading)
    rows: list[dict] = field(default_factory=list)
    # key -> the page a cell of that column links to (on the page only, not in exports).
    links: dict[str, Callable[[dict], str]] = field(default_factory=dict)

    @property
    def keys(self) -> list[str]:
        return [key for key, _ in self.columns]

    def as_lists(self) -> list[list]:
        return [[row.get(key) for key in self.keys] for row in self.rows]

    def cells(self) -> list[list[tuple]]:
        """(value as a person reads it, link or "") per cell, for the HTML table."""
        return [
            [
                (
                    row.get(key) if key in IDENTIFIERS else formatted(row.get(key)),
                    self.links[key](row) if key in self.links else "",
                )
                for key in self.keys
            ]
            for row in self.rows
        ]


@dataclass
class Report:
    """A computed report: headline figures, tables and an optional note for the reader."""

    name: str
    title: str
    query: ReportQuery
    summary: dict[str, float | int | str] = field(default_factory=dict)
    tables: list[Table] = field(default_factory=list)
    message: str = ""
    notes: list[str] = field(default_factory=list)

    def headline(self) -> list[tuple[str, float | int | str]]:
        """The summary as a person reads it: (label, value), labelled as the tables head
        the same figure ("allocated GPU-h"), not by its key in the JSON and CSV."""
        headings = {key: heading for table in self.tables for key, heading in table.columns}
        return [
            (LABELS.get(key) or headings.get(key) or readable(key), value)
            for key, value in self.summary.items()
        ]

    def table(self, name: str | None = None) -> Table:
        """The named table, or the report's main (first) table."""
        if not name:
            return self.tables[0]
        for table in self.tables:
            if table.name == name:
                return table
        raise KeyError(name)


_UNITS = (("_gpu_h", " GPU-h"), ("_pct", " %"), ("_min", " (min)"), ("_h", " (h)"))
_WORDS = {"gpu": "GPU", "mtbf": "MTBF", "mttr": "MTTR", "ettr": "ETTR", "xid": "XID"}


def readable(key: str) -> str:
    """A summary key as words: `gpu_mtbf_h` -> "GPU MTBF (h)"."""
    unit = ""
    for suffix, words in _UNITS:
        if key.endswith(suffix):
            key, unit = key.removesuffix(suffix), words
            break
    return " ".join(_WORDS.get(word, word) for word in key.split("_")) + unit


def hours(seconds: float | None) -> float:
    return round((seconds or 0.0) / 3600, 2)


def minutes(seconds: float | None) -> float:
    return round((seconds or 0.0) / 60, 1)


def percent(part: float | None, whole: float | None) -> float:
    return round(100 * (part or 0.0) / whole, 1) if whole else 0.0


def sql_list(values) -> str:
    """A SQL list literal of constant identifiers from code (never user input)."""
    return "(" + ", ".join(f"'{value}'" for value in values) + ")"
