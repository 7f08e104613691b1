"""Agent event ingestion: validation, idempotency, folding, incidents, GPU health.

Everything for one batch happens in one transaction with a constant number of
queries; live updates and remediation triggers fire only after it commits.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from agent import schema
from agent import xid as catalogue
from agent.schema import BatchInvalid as BatchInvalid  # what validate_batch raises
from clusters.live import publish_nodes
from clusters.models import Gpu, GpuHealth, Node
from core import live
from core.sql import bulk_write, one_of
from health.models import (
    CheckStatus,
    EventKind,
    HealthEvent,
    Incident,
    ReceivedEventId,
    Severity,
)

# Identical repeats inside this window fold into one row with a count.
FOLD_WINDOW = timedelta(minutes=5)
# NVIDIA Fleet Intelligence closes an XID burst after 3 minutes of silence.
INCIDENT_SILENCE = timedelta(minutes=3)
SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}
# Rows of one batch pushed to open event feeds: a catch-up batch of hundreds would cost
# a render each and swamp browsers with rows they cannot show; the newest matter.
LIVE_ROWS_PER_BATCH = 25
RECEIVED_COLUMNS = ("node", "event_id", "received_at")

# Called after commit with the incidents a batch opened or whose XIDs or severity changed
# (the remediation engine); a repeat of what an incident already holds decides nothing new.
incident_listeners: list[Callable[[list[int]], None]] = []
# Called after commit with (node id, [(check name, GPU index)]) for the checks a batch
# reported passing: a fault that clears before anything was done about it is closed.
passed_check_listeners: list[Callable[[int, list[tuple[str, int | None]]], None]] = []


@dataclass
class Batch:
    node: str
    events: list[dict]


@dataclass
class IngestResult:
    accepted: int = 0
    duplicates: int = 0
    folded: int = 0
    event_ids: list[int] = field(default_factory=list)
    incident_ids: list[int] = field(default_factory=list)
    # The incidents this batch opened or whose XIDs or severity it changed: only these
    # can call for a different remediation, so only these go to `incident_listeners`.
    changed_incident_ids: list[int] = field(default_factory=list)


# ----------------------------------------------------------------- validation
def validate_batch(payload, *, now: datetime | None = None) -> Batch:
    """Strict, fast validation of an agent batch; raises BatchInvalid with per-field errors.

    The rules are the agent event schema's (agent.schema), the one the agent builds
    its events with and the API docs describe.
    """
    node, events = schema.validate_batch(payload, now=now or timezone.now())
    return Batch(node=node, events=events)


# ----------------------------------------------------------------- storing
def ingest(node: Node, events: list[dict], *, now: datetime | None = None) -> IngestResult:
    """Store a validated batch for `node`: idempotent on event id, folded, grouped."""
    now = now or timezone.now()
    result = IngestResult()
    with transaction.atomic():
        claimed = _claim_event_ids(node, [event["id"] for event in events], now)
        fresh = sorted((e for e in events if e["id"] in claimed), key=lambda e: e["observed_at"])
        result.duplicates = len(events) - len(fresh)
        if not fresh:
            return result
        _index_by_pci(node, fresh)
        rows, folded = _fold(node, fresh, now)
        incidents, changed = _group_into_incidents(node, rows)
        _save_rows(rows)
        result.accepted, result.folded = len(fresh), folded
        result.event_ids = [row.pk for row in rows]
        result.incident_ids = sorted({incident.pk for incident in incidents})
        result.changed_incident_ids = sorted(changed)
        changed_gpus = _update_gpu_health(node, fresh, now)
        _publish_after_commit(node, rows, result, changed_gpus)
    return result


def _index_by_pci(node: Node, events: list[dict]) -> None:
    """The GPU index of events that name only the GPU's PCI address (XIDs from the kernel)."""
    unplaced = [event for event in events if event["gpu_index"] is None and event["pci"]]
    if not unplaced:
        return
    gpu_by_pci = dict(
        Gpu.objects.filter(node=node).exclude(pci_bus_id="").values_list("pci_bus_id", "index")
    )
    for event in unplaced:
        event["gpu_index"] = gpu_by_pci.get(event["pci"])


def _claim_event_ids(node: Node, ids: list[str], now: datetime) -> set[str]:
    """Record the batch's event ids and return the ones never received before.

    One `INSERT ... ON CONFLICT DO NOTHING RETURNING` (PostgreSQL, SQLite >= 3.35) instead
    of a check then an insert: an agent that retries after a timeout while its first
    request still runs would let both pass the check, and the second then fail on the
    unique constraint. Here the second waits for the first to commit and claims nothing.
    """
    meta = ReceivedEventId._meta
    quote = connection.ops.quote_name
    columns = ", ".join(quote(meta.get_field(name).column) for name in RECEIVED_COLUMNS)
    stamp = meta.get_field("received_at").get_db_prep_value(now, connection)
    if connection.vendor == "postgresql":
        # The ids as one array: psycopg parses a statement of 1,500 placeholders anew each
        # time (too long for its cache), 6 ms a batch of 500.
        values, params = "SELECT %s, unnest(%s::text[]), %s", [node.pk, list(ids), stamp]
    else:
        values = "VALUES " + ", ".join(["(%s, %s, %s)"] * len(ids))
        params = [value for event_id in ids for value in (node.pk, event_id, stamp)]
    # Only quoted names from the model's meta are formatted in; every value is a parameter.
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({columns}) {values}"  # noqa: S608
        f" ON CONFLICT DO NOTHING RETURNING {quote(meta.get_field('event_id').column)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {event_id for (event_id,) in cursor.fetchall()}


def _severity(event: dict) -> str:
    if event["kind"] == EventKind.XID:
        return str(catalogue.lookup(event["xid"]).severity)
    return {
        CheckStatus.FAIL: Severity.CRITICAL,
        CheckStatus.WARN: Severity.WARNING,
    }.get(event["status"], Severity.INFO)


def _fold_key(node: Node, event: dict) -> str:
    parts = (
        node.pk,
        event["kind"],
        event["xid"],
        event["pci"],
        event["gpu_index"],
        event["gpu_instance"],
        event["check"],
        event["status"],
        event["message"],
    )
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _fold(node: Node, events: list[dict], now: datetime) -> tuple[list[HealthEvent], int]:
    """Fold identical repeats; each returned row carries `batch_count`, its share of this batch.

    Nothing is written yet: rows get their incident first, so that new rows are inserted
    once, complete, instead of inserted and then updated row by row.
    """
    keys = {id(event): _fold_key(node, event) for event in events}
    earliest = events[0]["observed_at"] - FOLD_WINDOW
    recent = HealthEvent.objects.filter(node=node, last_observed_at__gte=earliest)
    open_rows = {
        row.fold_key: row
        for row in recent.filter(one_of("fold_key", sorted(set(keys.values())))).order_by(
            "last_observed_at"
        )
    }
    new_rows, grown, folded = [], {}, 0
    for event in events:
        key = keys[id(event)]
        row = open_rows.get(key)
        if row is not None and event["observed_at"] - row.last_observed_at <= FOLD_WINDOW:
            row.count += 1
            row.batch_count = getattr(row, "batch_count", 0) + 1
            row.last_observed_at = max(row.last_observed_at, event["observed_at"])
            folded += 1
            if row.pk:
                grown[row.pk] = row
            continue
        row = _new_row(node, event, key, now)
        row.batch_count = 1
        open_rows[key] = row
        new_rows.append(row)
    return [*new_rows, *grown.values()], folded


def _save_rows(rows: list[HealthEvent]) -> None:
    grown = [row for row in rows if row.pk is not None]
    new = [row for row in rows if row.pk is None]
    if connection.vendor == "postgresql":
        copy_rows(new)
    else:
        HealthEvent.objects.bulk_create(new)
    bulk_write(HealthEvent, grown, ["count", "last_observed_at", "incident"])


def copy_rows(rows: list[HealthEvent]) -> None:
    """Insert new rows with PostgreSQL's COPY, ids drawn from the table's sequence first.

    `bulk_create` spent more time in Python (preparing 16 values per row, then quoting
    them into arrays) than PostgreSQL spent storing them; COPY sends each row as is.
    Values go in as the model holds them: HealthEvent has no auto_now field whose
    `pre_save` would have to run first.
    """
    if not rows:
        return
    meta = HealthEvent._meta
    fields = meta.concrete_fields
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in fields)
    json_fields = {f.attname: f.encoder for f in fields if f.get_internal_type() == "JSONField"}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
            [meta.db_table, meta.pk.column, len(rows)],
        )
        for row, (pk,) in zip(rows, cursor.fetchall(), strict=True):
            row.pk = pk
            row._state.adding, row._state.db = False, connection.alias
        # Only quoted names from the model's meta are formatted in; rows travel as data.
        sql = f"COPY {quote(meta.db_table)} ({columns}) FROM STDIN"
        with cursor.cursor.copy(sql) as copy:
            for row in rows:
                copy.write_row([_copy_value(row, field, json_fields) for field in fields])


def _copy_value(row: HealthEvent, field, json_fields: dict):
    value = getattr(row, field.attname)
    if field.attname in json_fields:
        return json.dumps(value, cls=json_fields[field.attname])
    return value


def _new_row(node: Node, event: dict, key: str, now: datetime) -> HealthEvent:
    data = dict(event["data"])
    for name in ("gpu_instance", "compute_instance", "pid", "process"):
        if event[name] not in (None, ""):
            data[name] = event[name]
    return HealthEvent(
        node=node,
        kind=event["kind"],
        xid=event["xid"],
        gpu_index=event["gpu_index"],
        pci=event["pci"],
        check_name=event["check"],
        status=event["status"] or "",
        severity=_severity(event),
        message=event["message"],
        data=data,
        observed_at=event["observed_at"],
        last_observed_at=event["observed_at"],
        received_at=now,
        fold_key=key,
    )


def _group_into_incidents(node: Node, rows: list[HealthEvent]) -> tuple[list[Incident], set[int]]:
    """Attach XIDs and failing checks to the open incident of their GPU, or open one.

    Returns the touched incidents and the ids of those opened or changed in XIDs or severity.
    """
    relevant = [row for row in rows if row.kind == EventKind.XID or row.severity != Severity.INFO]
    if not relevant:
        return [], set()
    earliest = min(row.observed_at for row in relevant) - INCIDENT_SILENCE
    open_incidents = {
        incident.gpu_index: incident
        for incident in Incident.objects.filter(node=node, last_event_at__gte=earliest).order_by(
            "last_event_at"
        )
    }
    # Keyed by object, as incidents opened here have no id until they are inserted.
    touched: dict[int, Incident] = {}
    headline: dict[int, HealthEvent] = {}
    # What each incident looked like before this batch; None for one it opened.
    before: dict[int, tuple | None] = {}
    for row in sorted(relevant, key=lambda r: r.observed_at):
        incident = open_incidents.get(row.gpu_index)
        if incident is None or row.observed_at - incident.last_event_at > INCIDENT_SILENCE:
            incident = Incident(
                node=node, gpu_index=row.gpu_index, opened_at=row.observed_at,
                last_event_at=row.observed_at,
            )  # fmt: skip
            open_incidents[row.gpu_index] = incident
            before[id(incident)] = None
        before.setdefault(id(incident), (list(incident.xids), incident.severity))
        _grow_incident(incident, row)
        if row.severity == incident.severity:
            headline[id(incident)] = row
        touched[id(incident)] = incident
        row.incident = incident
    # The summary names the latest event at the incident's worst severity; titles are
    # looked up once per incident, not once per event of a large batch.
    for key, row in headline.items():
        touched[key].summary = row.title[:255]
    changed = [
        incident
        for key, incident in touched.items()
        if before[key] != (list(incident.xids), incident.severity)
    ]
    for incident in changed:
        # Waiting for the remediation trigger, which decides a storm's many at a time.
        incident.decision_due = True
    # Opened ones are inserted complete; the others updated, `decision_due` only where
    # they changed (another request's pass may be clearing it on the rest meanwhile).
    Incident.objects.bulk_create([i for i in touched.values() if i.pk is None])
    grown = ["last_event_at", "severity", "xids", "event_count", "summary"]
    changed_keys = {id(incident) for incident in changed}
    existing = [i for key, i in touched.items() if before[key] is not None]
    bulk_write(Incident, [i for i in existing if id(i) in changed_keys], [*grown, "decision_due"])
    bulk_write(Incident, [i for i in existing if id(i) not in changed_keys], grown)
    for row in relevant:
        row.incident_id = row.incident.pk  # set before its incident was inserted
    return list(touched.values()), {incident.pk for incident in changed}


def _grow_incident(incident: Incident, row: HealthEvent) -> None:
    incident.last_event_at = max(incident.last_event_at, row.last_observed_at)
    incident.event_count += row.batch_count
    if SEVERITY_RANK[row.severity] > SEVERITY_RANK[incident.severity]:
        incident.severity = row.severity
    if row.xid is not None and row.xid not in incident.xids:
        incident.xids = [*incident.xids, row.xid]


def _update_gpu_health(node: Node, events: list[dict], now: datetime) -> bool:
    verdicts: dict[int, tuple[str, str]] = {}
    for event in events:
        index = event["gpu_index"]
        severity = _severity(event)
        if index is None or severity == Severity.INFO:
            continue
        health = GpuHealth.FAILED if severity == Severity.CRITICAL else GpuHealth.DEGRADED
        if verdicts.get(index, ("",))[0] == GpuHealth.FAILED:
            continue
        reason = _health_reason(event)
        verdicts[index] = (health, reason)
    if not verdicts:
        return False
    indexes_by_verdict: dict[tuple[str, str], list[int]] = {}
    for index, (health, reason) in verdicts.items():
        indexes_by_verdict.setdefault((health, reason[:255]), []).append(index)
    changed = 0
    for (health, reason), indexes in indexes_by_verdict.items():
        gpus = Gpu.objects.filter(node=node, index__in=indexes)
        if health == GpuHealth.DEGRADED:
            gpus = gpus.exclude(health=GpuHealth.FAILED)  # a warning never hides a failure
        # A GPU that keeps reporting the same fault has not changed: its time stays, and
        # the board is not re-sent to every browser for each repeat.
        changed += gpus.exclude(health=health, health_reason=reason).update(
            health=health, health_reason=reason, health_changed_at=now
        )
    return bool(changed)


def _health_reason(event: dict) -> str:
    if event["kind"] == EventKind.XID:
        info = catalogue.lookup(event["xid"])
        return f"XID {event['xid']}: {info.name}" if info.known else f"unknown XID {event['xid']}"
    return f"{event['check']}: {event['message']}"


def _publish_after_commit(
    node: Node, rows: list[HealthEvent], result: IngestResult, gpus_changed: bool
) -> None:
    # Only the newest rows go to open feeds (see health.views.LIVE_ROWS_PER_BATCH); picking
    # them here spares the publisher a query over every row of a large batch.
    newest = sorted(rows, key=lambda row: (row.last_observed_at, row.pk))
    event_ids = [row.pk for row in newest[-LIVE_ROWS_PER_BATCH:]]
    incident_ids, node_id, cluster_id = list(result.changed_incident_ids), node.pk, node.cluster_id
    passed = sorted(
        {
            (row.check_name, row.gpu_index)
            for row in rows
            if row.kind == EventKind.CHECK and row.status == CheckStatus.PASS
        },
        key=str,
    )

    def publish() -> None:
        from health.live import publish_events

        with live.one_trip():
            publish_events(event_ids, cluster_id)
            if gpus_changed:
                publish_nodes([node_id])
        if incident_ids:
            for listener in list(incident_listeners):
                listener(incident_ids)
        if passed:
            for listener in list(passed_check_listeners):
                listener(node_id, passed)

    transaction.on_commit(publish)
