"""The agent event: one definition for what the agent sends, the server accepts and the docs say.

`FIELDS` is the wire format of `POST /api/v1/health/events/`. The agent builds its events
with `event()`, the server checks each batch with `validate_batch()` and the OpenAPI
schema is generated from `FIELDS`, so the three cannot drift apart. A key that is not a
field is refused, not ignored: an agent newer than its server would otherwise lose facts
without anyone noticing. Like the rest of the agent, this module imports nothing from
Django.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone

from agent.checks.base import CheckStatus

MAX_BATCH = 1000
MAX_MESSAGE = 4000
# The server refuses timestamps outside this window of its own clock.
MAX_FUTURE = timedelta(minutes=5)
MAX_PAST = timedelta(days=30)


class EventKind(enum.StrEnum):
    XID = "xid"
    CHECK = "check"
    NVML = "nvml"
    DCGM = "dcgm"


class BatchInvalid(Exception):
    """A batch the server refuses; `errors` maps each field at fault to its messages."""

    def __init__(self, errors: dict[str, list[str]]):
        super().__init__("invalid batch")
        self.errors = errors


@dataclass(frozen=True)
class Field:
    """One key of an event. `limit` is a string's length or an integer's largest value."""

    name: str
    type: str  # "string", "integer", "choice", "timestamp" or "object"
    description: str
    required: bool = False
    limit: int | None = None
    choices: tuple[str, ...] = ()
    pattern: str = ""
    pattern_error: str = ""
    lowercase: bool = False


FIELDS = (
    Field("id", "string", "Unique per node; a repeated id is counted once (retries are safe).",
          required=True, limit=128, pattern=r"^[A-Za-z0-9._:-]{1,128}$",
          pattern_error="Use 1-128 letters, digits, '.', '_', ':' or '-'."),
    Field("kind", "choice", "What reported it: a kernel Xid line, a health check, NVML or DCGM.",
          required=True, choices=tuple(EventKind)),
    Field("observed_at", "timestamp",
          "When the node saw it: ISO-8601 with a time zone, at most 5 minutes ahead of the "
          "server's clock and at most 30 days old.", required=True),
    Field("xid", "integer", "The Xid code; required when kind is xid.", limit=100_000),
    Field("pci", "string", "The GPU's PCI address as domain:bus:device, e.g. 0000:3b:00.",
          limit=16, pattern=r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}$",
          pattern_error="Must look like 0000:3b:00 (domain:bus:device).", lowercase=True),
    Field("gpu_index", "integer", "The GPU's index on the node; found from pci when null.",
          limit=255),
    Field("gpu_instance", "integer", "The MIG GPU instance the Xid names.", limit=255),
    Field("compute_instance", "integer", "The MIG compute instance the Xid names.", limit=255),
    Field("pid", "integer", "The process the Xid names.", limit=2**31),
    Field("process", "string", "The name of the process the Xid names.", limit=256),
    Field("check", "string", "The health check's name; required when kind is check.", limit=64),
    Field("status", "choice", "The health check's outcome.", choices=tuple(CheckStatus)),
    Field("message", "string", "What the driver or the check said.", limit=MAX_MESSAGE),
    Field("data", "object", "Further facts as a JSON object (the Xid's name, a check's figures)."),
)  # fmt: skip
FIELD_NAMES = tuple(field.name for field in FIELDS)
_PATTERNS = {field.name: re.compile(field.pattern) for field in FIELDS if field.pattern}


def event(**facts) -> dict:
    """An event with every field, the ones not given null; an unknown name is a bug here."""
    unknown = sorted(set(facts) - set(FIELD_NAMES))
    if unknown:
        raise TypeError(f"Not agent event fields: {', '.join(unknown)}")
    return {name: facts.get(name) for name in FIELD_NAMES}


# ----------------------------------------------------------------- validation
def validate_batch(payload, *, now: datetime) -> tuple[str, list[dict]]:
    """The node and the clean events of a batch; raises BatchInvalid with per-field errors."""
    if not isinstance(payload, dict):
        raise BatchInvalid({"non_field_errors": ["Expected a JSON object."]})
    errors: dict[str, list[str]] = {}
    node = payload.get("node")
    if not isinstance(node, str) or not node or len(node) > 128:
        errors["node"] = ["A node name (string) is required."]
    events = payload.get("events")
    if not isinstance(events, list) or not events:
        errors["events"] = ["A non-empty list of events is required."]
    elif len(events) > MAX_BATCH:
        errors["events"] = [f"At most {MAX_BATCH} events per request; got {len(events)}."]
    if errors:
        raise BatchInvalid(errors)
    cleaned, seen_ids = [], set()
    for position, raw in enumerate(events):
        clean, event_errors = validate_event(raw, now=now)
        for name, messages in event_errors.items():
            errors[f"events[{position}].{name}"] = messages
        if clean is not None:
            if clean["id"] in seen_ids:
                errors[f"events[{position}].id"] = [f"Duplicate id {clean['id']!r} in batch."]
            seen_ids.add(clean["id"])
            cleaned.append(clean)
    if errors:
        raise BatchInvalid(errors)
    return node, cleaned


def validate_event(raw, *, now: datetime) -> tuple[dict | None, dict[str, list[str]]]:
    """The clean event (None if refused) and the errors per field name."""
    if not isinstance(raw, dict):
        return None, {"non_field_errors": ["Each event must be a JSON object."]}
    errors: dict[str, list[str]] = {}
    for key in raw:
        if key not in FIELD_NAMES:
            errors[str(key)] = [
                f"Unknown field {key!r}; an event has only {', '.join(FIELD_NAMES)}."
            ]
    clean = {}
    for field in FIELDS:
        clean[field.name], problem = _CLEANERS[field.type](field, raw.get(field.name), now)
        if problem:
            errors[field.name] = [problem]
    if clean["kind"] == EventKind.XID and clean["xid"] is None and "xid" not in errors:
        errors["xid"] = ["An xid event needs an integer xid."]
    if clean["kind"] == EventKind.CHECK and not clean["check"] and "check" not in errors:
        errors["check"] = ["A check event needs the check's name."]
    return (None if errors else clean), errors


def _string(field: Field, value, now) -> tuple[str, str]:
    if value is None:
        return "", "This field is required." if field.required else ""
    if not isinstance(value, str):
        return "", "Must be a string."
    problem = ""
    if len(value) > field.limit:
        problem = f"At most {field.limit} characters."
    if "\x00" in value:
        problem = "Must not contain NUL characters."
    value = value[: field.limit]
    if field.lowercase:
        value = value.lower()
    if value and field.name in _PATTERNS and not _PATTERNS[field.name].match(value):
        problem = field.pattern_error
    return value, problem


def _integer(field: Field, value, now) -> tuple[int | None, str]:
    if value is None:
        return None, ""
    if isinstance(value, bool) or not isinstance(value, int):
        return None, "Must be an integer or null."
    if not 0 <= value <= field.limit:
        return None, f"Must be between 0 and {field.limit}."
    return value, ""


def _choice(field: Field, value, now) -> tuple[object, str]:
    if value is None and not field.required:
        return None, ""
    if value not in field.choices:
        allowed = ", ".join(field.choices) + ("" if field.required else " or null")
        return value, f"Must be one of {allowed}."
    return value, ""


def _object(field: Field, value, now) -> tuple[object, str]:
    value = value or {}  # null, and any other empty value, means no further facts
    return value, "" if isinstance(value, dict) else "Must be a JSON object."


def _timestamp(field: Field, value, now: datetime) -> tuple[datetime | None, str]:
    moment = parse_timestamp(value) if isinstance(value, str) else None
    if moment is None or moment.tzinfo is None:
        return None, "An ISO-8601 timestamp with a time zone is required."
    if moment > now + MAX_FUTURE:
        return moment, "Is in the future; check the node's clock."
    if moment < now - MAX_PAST:
        return moment, "Is more than 30 days old."
    return moment, ""


_CLEANERS = {
    "string": _string,
    "integer": _integer,
    "choice": _choice,
    "object": _object,
    "timestamp": _timestamp,
}

# What Django's parse_datetime accepts beyond datetime.fromisoformat (one-digit months,
# days and hours, a space before the zone, more than six fractional digits): the server
# accepted these before this module replaced it, so agents and scripts may send them.
_LOOSE_ISO = re.compile(
    r"(?P<year>\d{4})-(?P<month>\d{1,2})-(?P<day>\d{1,2})"
    r"[T ](?P<hour>\d{1,2}):(?P<minute>\d{1,2})"
    r"(?::(?P<second>\d{1,2})(?:[.,](?P<microsecond>\d{1,6})\d{0,6})?)?"
    r"\s*(?P<tzinfo>Z|[+-]\d{2}(?::?\d{2})?)?$"
)


def parse_timestamp(value: str) -> datetime | None:
    """An ISO-8601 timestamp, or None if it is not one (or names an impossible moment)."""
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        pass
    match = _LOOSE_ISO.match(value)
    if match is None:
        return None
    parts = match.groupdict()
    zone = parts.pop("tzinfo")
    parts["microsecond"] = (parts["microsecond"] or "").ljust(6, "0")
    try:
        return datetime(**{name: int(part) for name, part in parts.items() if part is not None},
                        tzinfo=_zone(zone))  # fmt: skip
    except ValueError:
        return None


def _zone(text: str | None) -> timezone | None:
    if text is None:
        return None
    if text == "Z":
        return UTC
    minutes = 60 * int(text[1:3]) + (int(text[-2:]) if len(text) > 3 else 0)
    return timezone(timedelta(minutes=-minutes if text[0] == "-" else minutes))
