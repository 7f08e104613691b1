"""Kernel-log (NVRM) parsing: Xid lines and the PCI -> GPU UUID lines, in every log format.

Formats: syslog (`Nov 29 10:01:02 host kernel: NVRM: ...`), `journalctl -k` (default,
`-o short-iso`, `-o short-precise`, `-o short-monotonic`), `dmesg` (`[12345.678901] NVRM: ...`),
`dmesg -T` (`[Sun Nov 29 10:01:02 2026] NVRM: ...`) and `/dev/kmsg` records
(`4,1234,5678901234,-;NVRM: ...`, third field = microseconds since boot).
Line shapes are those of §2.1 in reference/gpu-faults.md.
"""

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo

from agent.parsers.pci import normalise_pci

_PCI = r"(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-7])?"

_XID_RE = re.compile(
    r"Xid \((?:PCI:)?" + _PCI + r"(?: GPU-I:(?P<gi>\d+))?(?: GPU-CI:(?P<ci>\d+))?\):\s*"
    r"(?P<xid>\d+)(?:,\s*|\s*$)(?P<rest>.*)$"
)
_PID_RE = re.compile(r"^pid=(?P<pid>'<unknown>'|<unknown>|\d+)(?:,\s*|\s*$)")
_NAME_RE = re.compile(r"^name=(?P<name>[^,]*?)(?:,\s*|\s*$)")
_CHANNEL_RE = re.compile(r"\b(?:Ch|[Cc]hannel) (?:0x)?(?P<channel>[0-9a-fA-F]{1,8})\b")
_RESET_FLAGS_RE = re.compile(r"RST: (?P<rst>Yes|No), D-RST: (?P<drst>Yes|No)")
_RECOVERY_RE = re.compile(
    r"recovery action changed from 0x(?P<from>[0-9a-fA-F]+) \((?P<from_name>[^)]*)\) "
    r"to 0x(?P<to>[0-9a-fA-F]+) \((?P<to_name>[^)]*)\)"
)
_NVLINK5_RE = re.compile(
    r"^(?P<unit>[A-Z][A-Z0-9_]*) (?P<severity>Fatal|Nonfatal|NonFatal) XC[01] i\d+ "
    r"Link (?P<link>\d+)"
)
_FALLEN_RE = re.compile(r"^GPU " + _PCI + r": (?P<message>GPU has fallen off the bus.*)$")
_NVIDIA_GPU_RE = re.compile(r"^The NVIDIA GPU " + _PCI + r"\b(?P<tail>.*)$")
_UUID_RE = re.compile(r"^GPU at PCI:" + _PCI + r": (?P<uuid>GPU-[0-9a-fA-F-]+)")

_KMSG_RE = re.compile(r"^\d+,\d+,(?P<usec>\d+),[^;]*;")
_DMESG_T_RE = re.compile(r"\[(?:[A-Z][a-z]{2} )?(?P<when>[A-Z][a-z]{2} +\d{1,2} [\d:]{8} \d{4})\]")
_ISO_RE = re.compile(
    r"^(?P<when>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\s"
)
_SYSLOG_RE = re.compile(r"^(?P<when>[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))?\s")
_MONOTONIC_RE = re.compile(r"\[\s*(?P<seconds>\d+\.\d+)\]")

# The "The NVIDIA GPU ..." report of Xid 79 is spread over up to three kernel lines.
_FALLEN_CONTINUATION_LINES = 3


@dataclass(frozen=True)
class XidRecord:
    xid: int
    pci: str
    message: str
    raw: str
    observed_at: datetime | None = None
    pid: int | None = None
    process: str | None = None
    gpu_instance: int | None = None
    compute_instance: int | None = None
    channel: int | None = None
    reset_required: bool | None = None
    drain_and_reset: bool | None = None
    recovery_from: int | None = None
    recovery_to: int | None = None
    nvlink_unit: str | None = None
    nvlink_fatal: bool | None = None
    nvlink_link: int | None = None
    # True for an Xid 79 recognised from a "fallen off the bus" line that has no "Xid (...)":
    # the driver often prints both for one incident, so counters may want to skip these.
    implied: bool = False

    def extras(self) -> dict:
        """The optional, line-specific facts that are present, for an event's `data`."""
        names = (
            "reset_required", "drain_and_reset", "recovery_from", "recovery_to",
            "nvlink_unit", "nvlink_fatal", "nvlink_link",
        )  # fmt: skip
        found = {name: getattr(self, name) for name in names if getattr(self, name) is not None}
        if self.implied:
            found["implied"] = True
        return found


@dataclass(frozen=True)
class GpuUuidRecord:
    pci: str
    uuid: str
    raw: str
    observed_at: datetime | None = None


@dataclass(frozen=True)
class TimeContext:
    """What a line's own timestamp lacks: boot time for relative stamps, year, zone."""

    boot_time: datetime | None = None
    year: int | None = None
    tz: tzinfo = UTC


def split_line(line: str, context: TimeContext = TimeContext()) -> tuple[datetime | None, str]:
    """Split a log line into (timestamp, text after `NVRM:`); text is '' for non-NVRM lines."""
    marker = line.find("NVRM:")
    if marker < 0:
        return None, ""
    return parse_timestamp(line[:marker], context), line[marker + len("NVRM:") :].strip()


def parse_timestamp(prefix: str, context: TimeContext = TimeContext()) -> datetime | None:
    """The time in the part of a log line before `NVRM:`, in any supported format."""
    if match := _KMSG_RE.match(prefix):
        return _since_boot(context, microseconds=int(match["usec"]))
    if match := _DMESG_T_RE.search(prefix):
        when = datetime.strptime(" ".join(match["when"].split()), "%b %d %H:%M:%S %Y")
        return when.replace(tzinfo=context.tz)
    if match := _ISO_RE.match(prefix):
        return _parse_iso(match["when"], context.tz)
    if match := _SYSLOG_RE.match(prefix):
        return _parse_syslog(match["when"], match["frac"], context)
    if match := _MONOTONIC_RE.search(prefix):
        return _since_boot(context, seconds=float(match["seconds"]))
    return None


def _since_boot(context: TimeContext, **delta) -> datetime | None:
    if context.boot_time is None:
        return None
    return context.boot_time + timedelta(**delta)


def _parse_iso(text: str, tz: tzinfo) -> datetime:
    when = datetime.fromisoformat(text.replace(",", "."))
    return when if when.tzinfo else when.replace(tzinfo=tz)


def _parse_syslog(text: str, fraction: str | None, context: TimeContext) -> datetime:
    # Syslog lines carry no year. A December line read in January belongs to last year.
    now = datetime.now(context.tz)
    year = context.year or now.year
    when = datetime.strptime(f"{year} {' '.join(text.split())}", "%Y %b %d %H:%M:%S")
    when = when.replace(tzinfo=context.tz)
    if fraction:
        when += timedelta(microseconds=int(fraction[:6].ljust(6, "0")))
    if context.year is None and when > now + timedelta(days=1):
        when = when.replace(year=year - 1)
    return when


def parse_line(
    line: str,
    *,
    boot_time: datetime | None = None,
    year: int | None = None,
    tz: tzinfo = UTC,
) -> XidRecord | None:
    """One Xid record from one kernel-log line, or None if the line reports no Xid.

    `boot_time` dates dmesg/kmsg relative stamps; `year` and `tz` complete syslog and
    `dmesg -T` stamps, which carry no year or no zone.
    """
    return _parse_line(line, TimeContext(boot_time, year, tz))


def _parse_line(line: str, context: TimeContext) -> XidRecord | None:
    observed_at, text = split_line(line, context)
    if not text:
        return None
    raw = line.rstrip("\n")
    if match := _XID_RE.search(text):
        return _xid_record(match, raw, observed_at)
    if match := _FALLEN_RE.match(text):
        return _fallen_off_bus(match["pci"], match["message"], raw, observed_at)
    match = _NVIDIA_GPU_RE.match(text)
    if match and "fallen off the bus" in match["tail"]:
        return _fallen_off_bus(match["pci"], text, raw, observed_at)
    return None


def parse_gpu_uuid(line: str, context: TimeContext = TimeContext()) -> GpuUuidRecord | None:
    """The `NVRM: GPU at PCI:0000:9b:00: GPU-<uuid>` line that maps a PCI address to a UUID."""
    observed_at, text = split_line(line, context)
    match = _UUID_RE.match(text)
    if match is None:
        return None
    return GpuUuidRecord(
        pci=normalise_pci(match["pci"]),
        uuid=match["uuid"],
        raw=line.rstrip("\n"),
        observed_at=observed_at,
    )


def _xid_record(match: re.Match, raw: str, observed_at: datetime | None) -> XidRecord:
    xid = int(match["xid"])
    pid, process, message = _owner_and_message(match["rest"])
    return XidRecord(
        xid=xid,
        pci=normalise_pci(match["pci"]),
        message=message,
        raw=raw,
        observed_at=observed_at,
        pid=pid,
        process=process,
        gpu_instance=_optional_int(match["gi"]),
        compute_instance=_optional_int(match["ci"]),
        channel=_channel(message),
        **_reset_flags(message),
        **_recovery_change(message),
        **(_nvlink5(message) if 144 <= xid <= 150 else {}),
    )


def _owner_and_message(rest: str) -> tuple[int | None, str | None, str]:
    pid = process = None
    if match := _PID_RE.match(rest):
        pid = int(match["pid"]) if match["pid"].isdigit() else None
        rest = rest[match.end() :]
    if match := _NAME_RE.match(rest):
        process = None if match["name"] in ("<unknown>", "") else match["name"]
        rest = rest[match.end() :]
    return pid, process, rest.strip()


def _optional_int(text: str | None) -> int | None:
    return None if text is None else int(text)


def _channel(message: str) -> int | None:
    match = _CHANNEL_RE.search(message)
    return None if match is None else int(match["channel"], 16)


def _reset_flags(message: str) -> dict:
    match = _RESET_FLAGS_RE.search(message)
    if match is None:
        return {}
    return {"reset_required": match["rst"] == "Yes", "drain_and_reset": match["drst"] == "Yes"}


def _recovery_change(message: str) -> dict:
    match = _RECOVERY_RE.search(message)
    if match is None:
        return {}
    return {"recovery_from": int(match["from"], 16), "recovery_to": int(match["to"], 16)}


def _nvlink5(message: str) -> dict:
    match = _NVLINK5_RE.match(message)
    if match is None:
        return {}
    return {
        "nvlink_unit": match["unit"],
        "nvlink_fatal": match["severity"] == "Fatal",
        "nvlink_link": int(match["link"]),
    }


def _fallen_off_bus(pci: str, message: str, raw: str, observed_at: datetime | None):
    return XidRecord(
        xid=79,
        pci=normalise_pci(pci),
        message=" ".join(message.split()),
        raw=raw,
        observed_at=observed_at,
        implied=True,
    )


@dataclass
class KmsgParser:
    """Line-at-a-time parser that also joins the multi-line "fallen off the bus" report."""

    context: TimeContext = field(default_factory=TimeContext)
    _pending: list[str] = field(default_factory=list)
    _pending_pci: str = ""
    _pending_at: datetime | None = None

    def feed(self, line: str) -> list[XidRecord | GpuUuidRecord]:
        observed_at, text = split_line(line, self.context)
        if not text:
            return []
        if self._pending:
            return self._continue_fallen_report(line, text)
        match = _NVIDIA_GPU_RE.match(text)
        if match and "fallen off the bus" not in match["tail"]:
            self._pending = [line.rstrip("\n")]
            self._pending_pci, self._pending_at = match["pci"], observed_at
            return []
        record = _parse_line(line, self.context) or parse_gpu_uuid(line, self.context)
        return [] if record is None else [record]

    def _continue_fallen_report(self, line: str, text: str) -> list:
        self._pending.append(line.rstrip("\n"))
        if "fallen off the bus" in text:
            texts = [split_line(part, self.context)[1] for part in self._pending]
            record = _fallen_off_bus(
                self._pending_pci, " ".join(texts), "\n".join(self._pending), self._pending_at
            )
            self._pending = []
            return [record]
        if len(self._pending) >= _FALLEN_CONTINUATION_LINES:
            # Not the report we expected: forget the opening line, parse this one alone.
            self._pending = []
            return self.feed(line)
        return []


def parse_records(
    lines: Iterable[str],
    *,
    boot_time: datetime | None = None,
    year: int | None = None,
    tz: tzinfo = UTC,
) -> list[XidRecord | GpuUuidRecord]:
    """Every Xid and PCI -> UUID record in a kernel log, in order."""
    parser = KmsgParser(TimeContext(boot_time, year, tz))
    return [record for line in lines for record in parser.feed(line)]


def parse_lines(
    lines: Iterable[str],
    *,
    boot_time: datetime | None = None,
    year: int | None = None,
    tz: tzinfo = UTC,
) -> list[XidRecord]:
    """Every Xid record in a kernel log, in order, including multi-line Xid 79 reports."""
    records = parse_records(lines, boot_time=boot_time, year=year, tz=tz)
    return [record for record in records if isinstance(record, XidRecord)]


def gpu_uuids(lines: Iterable[str]) -> dict[str, str]:
    """PCI address -> GPU UUID from the `NVRM: GPU at PCI:...` lines of a kernel log."""
    records = parse_records(lines)
    return {record.pci: record.uuid for record in records if isinstance(record, GpuUuidRecord)}
