"""Events the agent sends to `POST /api/v1/health/events/`, built from records and results.

Each event is built by the event schema (agent.schema), so it has exactly the keys
the server accepts, absent facts null. Ids are assigned once: an Xid event's id hashes the
node, the raw log line and how many identical lines came before it, so re-reading the same
log gives the same ids and the idempotent server drops repeats.
"""

import hashlib
import uuid
from collections import Counter
from datetime import UTC, datetime

from agent import schema
from agent import xid as xid_catalogue
from agent.checks.base import CheckResult
from agent.parsers.kmsg import GpuUuidRecord, XidRecord

# Identical raw lines carry the same timestamp, so they can only repeat close together.
_REMEMBERED_LINES = 10_000


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


def xid_event_id(node: str, raw: str, occurrence: int) -> str:
    return hashlib.sha256(f"{node}\n{raw}\n{occurrence}".encode()).hexdigest()[:32]


def xid_event(
    record: XidRecord, *, node: str, occurrence: int = 0, gpu_uuid: str | None = None
) -> dict:
    info = xid_catalogue.lookup(record.xid)
    observed_at = record.observed_at
    data = {
        "name": info.name,
        "mnemonic": info.mnemonic,
        "severity": str(info.severity),
        "rung": str(info.rung),
        "channel": record.channel,
        "raw": record.raw,
        "gpu_uuid": gpu_uuid,
        **record.extras(),
    }
    if observed_at is None:
        # The line had no usable timestamp (e.g. dmesg without a boot time): use now.
        observed_at = datetime.now(UTC)
        data["observed_at_source"] = "agent"
    return schema.event(
        id=xid_event_id(node, record.raw, occurrence),
        kind=str(schema.EventKind.XID),
        observed_at=iso(observed_at),
        xid=record.xid,
        pci=record.pci,
        gpu_instance=record.gpu_instance,
        compute_instance=record.compute_instance,
        pid=record.pid,
        process=record.process,
        message=record.message,
        data=data,
    )


def check_event(result: CheckResult, *, observed_at: datetime | None = None) -> dict:
    return schema.event(
        id=uuid.uuid4().hex,
        kind=str(schema.EventKind.CHECK),
        observed_at=iso(observed_at or datetime.now(UTC)),
        check=result.name,
        status=str(result.status),
        message=result.message,
        data={**result.data, "duration_s": result.duration_s},
    )


class XidEventBuilder:
    """Turns kernel-log records into events, remembering PCI -> UUID lines and repeats."""

    def __init__(self, node: str):
        self.node = node
        self.gpu_uuids: dict[str, str] = {}
        self._seen_raw: Counter[str] = Counter()

    def build(self, records: list[XidRecord | GpuUuidRecord]) -> list[dict]:
        events = []
        for record in records:
            if isinstance(record, GpuUuidRecord):
                self.gpu_uuids[record.pci] = record.uuid
                continue
            if len(self._seen_raw) > _REMEMBERED_LINES:
                self._seen_raw.clear()
            occurrence = self._seen_raw[record.raw]
            self._seen_raw[record.raw] += 1
            events.append(
                xid_event(
                    record,
                    node=self.node,
                    occurrence=occurrence,
                    gpu_uuid=self.gpu_uuids.get(record.pci),
                )
            )
        return events
