"""Durable on-disk queue of events: nothing is lost while the portal is unreachable.

Layout of the spool directory:

    segments/0000000001.jsonl   one event per line, appended and fsync'd before sending
    ack.json                    {"segment": N, "offset": BYTES}: first event not yet accepted
    rejected/<time>-<seg>.jsonl batches the portal refused permanently (4xx), kept for people

The ack pointer only moves after the portal accepted a batch, and is replaced atomically
(write, fsync, rename), so a crash at any moment resends at most the last batch; the
server is idempotent on event id, so a resend never duplicates.
"""

import json
import logging
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

log = logging.getLogger(__name__)

SEGMENT_MAX_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, order=True)
class Pointer:
    segment: int
    offset: int


@dataclass(frozen=True)
class Batch:
    events: list[dict]
    end: Pointer


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Spool:
    def __init__(self, root: str | Path, segment_max_bytes: int = SEGMENT_MAX_BYTES):
        self.root = Path(root)
        self.segments_dir = self.root / "segments"
        self.rejected_dir = self.root / "rejected"
        self.segment_max_bytes = segment_max_bytes
        for folder in (self.segments_dir, self.rejected_dir):
            folder.mkdir(parents=True, exist_ok=True)
        self._drop_torn_tail()

    # -- writing -------------------------------------------------------------------------

    def append(self, events: list[dict]) -> None:
        """Append events durably; returns only after they are on disk."""
        if not events:
            return
        payload = "".join(json.dumps(event, separators=(",", ":")) + "\n" for event in events)
        path = self._writable_segment()
        with open(path, "a", encoding="utf-8") as segment:
            segment.write(payload)
            segment.flush()
            os.fsync(segment.fileno())

    def _segment_path(self, number: int) -> Path:
        return self.segments_dir / f"{number:010d}.jsonl"

    def _segment_numbers(self) -> list[int]:
        return sorted(int(path.stem) for path in self.segments_dir.glob("*.jsonl"))

    def _writable_segment(self) -> Path:
        numbers = self._segment_numbers()
        if numbers:
            last = self._segment_path(numbers[-1])
            if last.stat().st_size < self.segment_max_bytes:
                return last
        path = self._segment_path((numbers[-1] + 1) if numbers else 1)
        path.touch()
        _fsync_dir(self.segments_dir)
        return path

    def _drop_torn_tail(self) -> None:
        # A crash mid-append can leave half a line; cut it so the next append starts clean.
        numbers = self._segment_numbers()
        if not numbers:
            return
        path = self._segment_path(numbers[-1])
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            with open(path, "r+b") as segment:
                segment.truncate(data.rfind(b"\n") + 1)
                os.fsync(segment.fileno())

    # -- reading and acknowledging -------------------------------------------------------

    def pointer(self) -> Pointer:
        try:
            saved = json.loads((self.root / "ack.json").read_text())
            return Pointer(int(saved["segment"]), int(saved["offset"]))
        except (OSError, ValueError, KeyError):
            numbers = self._segment_numbers()
            return Pointer(numbers[0] if numbers else 1, 0)

    def next_batch(self, limit: int) -> Batch:
        """Up to `limit` unacknowledged events, oldest first, and where they end."""
        start = self.pointer()
        events: list[dict] = []
        end = start
        for number in (n for n in self._segment_numbers() if n >= start.segment):
            offset = start.offset if number == start.segment else 0
            with open(self._segment_path(number), "rb") as segment:
                segment.seek(offset)
                for line in segment:
                    if len(events) >= limit:
                        return Batch(events, end)
                    offset += len(line)
                    end = Pointer(number, offset)
                    event = _decode(line, number)
                    if event is not None:
                        events.append(event)
        return Batch(events, end)

    def acknowledge(self, end: Pointer) -> None:
        """Mark everything before `end` as delivered and delete finished segments."""
        ack = self.root / "ack.json"
        temporary = ack.with_suffix(".tmp")
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump({"segment": end.segment, "offset": end.offset}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, ack)
        _fsync_dir(self.root)
        for number in self._segment_numbers():
            if number < end.segment:
                self._segment_path(number).unlink()

    def reject(self, batch: Batch, reason: str) -> Path:
        """Keep a permanently refused batch for people to inspect, then skip past it."""
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        path = self.rejected_dir / f"{stamp}-{batch.end.segment:010d}.jsonl"
        lines = [json.dumps({"reason": reason})] + [json.dumps(event) for event in batch.events]
        path.write_text("\n".join(lines) + "\n")
        self.acknowledge(batch.end)
        return path

    def pending(self) -> list[dict]:
        """Every event not yet accepted by the portal (for status output and tests)."""
        return self.next_batch(limit=2**31).events


def _decode(line: bytes, segment: int) -> dict | None:
    try:
        return json.loads(line)
    except ValueError:
        log.warning("skipping unreadable line in spool segment %d", segment)
        return None
