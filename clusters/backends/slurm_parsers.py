"""Pure parsers from Slurm's command output to the backend dataclasses.

Two generations of output are understood, told apart by their shape rather than a
version number so that one function serves both:

- Slurm 22.05: `sinfo --json` (a node list: lower-case `state` plus upper-case
  `state_flags`), `squeue --json` (plain integers, raw wait-status exit codes,
  `0` for unset times) and `scontrol -o show ...` text, because 22.05's scontrol
  has no `--json`.
- Slurm 23.02 and later (samples from 24.11): `scontrol show node|job|partition
  --json`, `squeue --json` and `sinfo --json` (grouped by partition and state),
  with upper-case state arrays, `{set, infinite, number}` numbers, exit-code
  objects and 0 or NO_VAL (4294967294) for unset times.

Nothing here runs a command or imports Django.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from functools import lru_cache
from typing import Any

import msgspec

from clusters.backends.base import (
    JOB_ACTIVE_STATES,
    NODE_BASE_STATES,
    JobInfo,
    NodeInfo,
    PartitionInfo,
)

# Slurm's NO_VAL/INFINITE sentinels; they mean "not set", never a real epoch.
UNSET_NUMBERS = frozenset({4294967294, 4294967295, 18446744073709551614, 18446744073709551615})

# Tokens Slurm prints instead of a time or a value.
TEXT_NONE_VALUES = frozenset({"", "(null)", "None", "Unknown", "N/A", "NONE", "n/a"})

# Flag spellings that differ between Slurm versions and tools, mapped to one name.
FLAG_ALIASES = {
    "draining": "drain",
    "drained": "drain",
    "maintenance": "maint",
    "power_down": "powered_down",
    "powered_off": "powered_down",
    "no_respond": "not_responding",
}

BASE_STATE_ALIASES = {"alloc": "allocated", "mix": "mixed", "unk": "unknown"}

# A sync parses thousands of records a cycle; these are compiled once.
LEADING_INT = re.compile(r"\s*(\d+)")
HOST_RANGE = re.compile(r"\[([^\]]*)\]")
GRES_SUFFIX = re.compile(r"\(.*?\)")
GRES_PREFIX = re.compile(r"^gres[:/]")
REASON_STAMP = re.compile(r"^(.*?)\s*\[([^@\]]*)@([^\]]+)\]\s*$")
SCONTROL_KEY = re.compile(r"[A-Za-z_][\w:/]*")
# Slurm repeats the same GRES, TRES and hostlist strings across thousands of
# records; their parsed forms are immutable, so each distinct string is parsed once.
PARSE_CACHE_SIZE = 4096


# ---------------------------------------------------------------- small values


def plain_number(value: Any) -> int | None:
    """An integer from a plain number or a 24.11 `{set, infinite, number}` object.

    None when unset, infinite or a NO_VAL sentinel.
    """
    # The two shapes Slurm prints, first: 22.05's plain numbers, 24.11's objects.
    if type(value) is int:
        return None if value in UNSET_NUMBERS else value
    if type(value) is dict:
        if not value.get("set", False) or value.get("infinite", False):
            return None
        value = value.get("number")
        if type(value) is int:
            return None if value in UNSET_NUMBERS else value
    if isinstance(value, Mapping):
        if not value.get("set", False) or value.get("infinite", False):
            return None
        value = value.get("number")
    if value is None or isinstance(value, bool):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return None if number in UNSET_NUMBERS else number


def is_infinite(value: Any) -> bool:
    return isinstance(value, Mapping) and bool(value.get("infinite"))


def epoch_to_datetime(value: Any) -> datetime | None:
    """An aware UTC datetime from an epoch; 0 and NO_VAL mean unset."""
    seconds = plain_number(value)
    if not seconds or seconds < 0:
        return None
    return datetime.fromtimestamp(seconds, tz=UTC)


def text_time(value: str | None, local_tz: tzinfo | None = None) -> datetime | None:
    """An aware UTC datetime from scontrol's `2026-11-29T08:17:51`.

    scontrol prints times in the client's local zone without saying which, so
    they are read in `local_tz` (default: this process's local zone).
    """
    if value is None or value.strip() in TEXT_NONE_VALUES:
        return None
    try:
        naive = datetime.strptime(value.strip(), "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None
    if local_tz is not None:
        return naive.replace(tzinfo=local_tz).astimezone(UTC)
    return naive.astimezone(UTC)


def duration_minutes(value: str | None) -> int | None:
    """Minutes from Slurm's `[days-]hours:minutes:seconds` (or bare minutes).

    None for UNLIMITED/INFINITE/NONE.
    """
    if value is None:
        return None
    text = value.strip()
    if text.upper() in {"UNLIMITED", "INFINITE", "NONE", "N/A", ""}:
        return None
    days = 0
    if "-" in text:
        day_part, text = text.split("-", 1)
        days = int(day_part)
    parts = [int(part) for part in text.split(":")]
    if len(parts) == 1:
        # A bare number is minutes, except after a day prefix ("2-3" is 2 days 3 hours).
        hours, minutes = (parts[0], 0) if days else (0, parts[0])
    elif len(parts) == 2:
        hours, minutes = (parts[0], parts[1]) if days else (0, parts[0])
    else:
        hours, minutes = parts[0], parts[1]
    return days * 24 * 60 + hours * 60 + minutes


def text_or_empty(value: Any) -> str:
    if value is None or value == "":
        return ""
    text = str(value).strip()
    return "" if text in {"(null)", "None", "N/A"} else text


def first_int(value: str | None, default: int = 0) -> int:
    """The leading integer of `4-4`, `2`, `alice(2001)`-style values."""
    match = LEADING_INT.match(value or "")
    return int(match.group(1)) if match else default


# ---------------------------------------------------------------- hostlists


def expand_hostlist(expression: str | None) -> tuple[str, ...]:
    """Node names from a Slurm hostlist: `gpu-[01-03,05]`, `node[1-2]-ib`, `a,b`."""
    if not expression:
        return ()
    if isinstance(expression, str):
        return _expand_hostlist(expression)
    return _expand_hostlist.__wrapped__(expression)


@lru_cache(maxsize=PARSE_CACHE_SIZE)
def _expand_hostlist(expression: str) -> tuple[str, ...]:
    text = expression.strip()
    if text in TEXT_NONE_VALUES or text == "None assigned":
        return ()
    names: list[str] = []
    for part in split_outside_brackets(text):
        names.extend(expand_one_host_pattern(part))
    return tuple(names)


def split_outside_brackets(text: str) -> list[str]:
    return [part.strip() for part in split_top_level(text, "[]") if part.strip()]


def split_top_level(text: str, pair: str) -> list[str]:
    """Split TEXT at commas that are not inside PAIR (e.g. "[]" or "()")."""
    opening, closing = pair
    parts, depth, current = [], 0, []
    for char in text:
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        if char == opening:
            depth += 1
        elif char == closing:
            depth -= 1
        current.append(char)
    parts.append("".join(current))
    return parts


def expand_one_host_pattern(pattern: str) -> list[str]:
    match = HOST_RANGE.search(pattern)
    if not match:
        return [pattern]
    prefix, suffix = pattern[: match.start()], pattern[match.end() :]
    names = []
    for item in match.group(1).split(","):
        for middle in expand_range(item.strip()):
            names.extend(expand_one_host_pattern(prefix + middle + suffix))
    return names


def expand_range(item: str) -> list[str]:
    """`01-03` keeps its zero padding: 01, 02, 03."""
    if "-" not in item:
        return [item]
    start, end = item.split("-", 1)
    width = len(start)
    return [str(number).zfill(width) for number in range(int(start), int(end) + 1)]


# ---------------------------------------------------------------- GRES and TRES


@dataclass(frozen=True)
class Gres:
    """One GRES entry such as `gpu:h100:8(S:0)`."""

    name: str
    type: str
    count: int


def parse_gres(text: str | None) -> list[Gres]:
    """Entries of a GRES string: `gpu:h100:8`, `gpu:8`, `gpu:h100:8(S:0),nic:1`,
    `gpu:h100:4(IDX:0-3)`. The `(S:..)`/`(IDX:..)` suffixes are dropped."""
    return list(_gres_entries(text or ""))


def _gres_entries(text: str) -> tuple[Gres, ...]:
    if isinstance(text, str):
        return _cached_gres_entries(text)
    return _cached_gres_entries.__wrapped__(text)


@lru_cache(maxsize=PARSE_CACHE_SIZE)
def _cached_gres_entries(text: str) -> tuple[Gres, ...]:
    entries = []
    for raw in split_top_level(text, "()"):
        entry = GRES_SUFFIX.sub("", raw).strip()
        if not entry or entry in TEXT_NONE_VALUES:
            continue
        # 22.05 job fields say "gres:gpu:8", 24.11 "gres/gpu:h100:4".
        entry = GRES_PREFIX.sub("", entry)
        fields = entry.split(":")
        if len(fields) >= 3 and fields[-1].isdigit():
            entries.append(Gres(fields[0], ":".join(fields[1:-1]), int(fields[-1])))
        elif len(fields) == 2 and fields[1].isdigit():
            entries.append(Gres(fields[0], "", int(fields[1])))
        elif len(fields) == 2:
            entries.append(Gres(fields[0], fields[1], 1))
        else:
            entries.append(Gres(fields[0], "", 1))
    return tuple(entries)


def gpu_count(gres_text: str | None) -> int:
    if not gres_text:
        return 0
    return sum(entry.count for entry in _gres_entries(gres_text) if entry.name == "gpu")


def gpu_model(gres_text: str | None) -> str:
    if not gres_text:
        return ""
    for entry in _gres_entries(gres_text):
        if entry.name == "gpu" and entry.type:
            return entry.type
    return ""


def tres_gpus(tres_text: str | None) -> int | None:
    """GPUs in a TRES string (`cpu=8,mem=4000M,gres/gpu=16`); None when absent.

    Typed entries (`gres/gpu:h100=8`) repeat the untyped total, so only that counts.
    """
    if not tres_text:
        return None
    if isinstance(tres_text, str):
        return _tres_gpus(tres_text)
    return _tres_gpus.__wrapped__(tres_text)


@lru_cache(maxsize=PARSE_CACHE_SIZE)
def _tres_gpus(tres_text: str) -> int | None:
    for item in tres_text.split(","):
        key, _, value = item.partition("=")
        if key.strip() == "gres/gpu" and value.strip().isdigit():
            return int(value)
    return None


# ---------------------------------------------------------------- node states


def split_node_state(tokens: Iterable[str]) -> tuple[str, frozenset[str]]:
    """Base state and lower-case flags from Slurm state tokens.

    `["IDLE", "DRAIN"]`, `"MIXED+DRAIN"`, `"DOWN*"` and sinfo's `drng`/`drained`
    all arrive here; Slurm 24.11 prints no DRAINING token, only MIXED + DRAIN.
    """
    base = ""
    flags: set[str] = set()
    for raw in tokens:
        token = raw.strip().lower()
        if not token:
            continue
        if token.endswith("*"):
            # sinfo's trailing '*' means the node is not responding.
            flags.add("not_responding")
            token = token.rstrip("*")
        token = BASE_STATE_ALIASES.get(token, token)
        if token in {"drng", "draining", "drained", "drain"}:
            flags.add("drain")
            if token in {"drng", "draining"} and not base:
                base = "mixed"
            continue
        if not base and token in NODE_BASE_STATES:
            base = token
            continue
        flags.add(FLAG_ALIASES.get(token, token))
    return (base or "unknown", frozenset(flags))


def text_reason(
    value: str | None, local_tz: tzinfo | None = None
) -> tuple[str, datetime | None, str]:
    """`xid 79 [root@2026-11-29T08:17:51]` -> reason, when set, by whom (text form)."""
    text = text_or_empty(value)
    match = REASON_STAMP.match(text)
    if not match:
        return text, None, ""
    return match.group(1), text_time(match.group(3), local_tz), match.group(2)


# ---------------------------------------------------------------- scontrol text


def parse_scontrol_records(text: str) -> list[dict[str, str]]:
    """Records of `scontrol show node|job|partition`, one-line (`-o`) or multi-line.

    Values may hold spaces (`OS=Linux 6.1 #1 SMP`, `Reason=xid 79 [root@...]`):
    a word without `=` continues the previous value, and a node's `Reason=` takes
    the rest of its line because an admin's free text may itself contain `=`
    (a job's Reason is one word and is followed by other fields).
    """
    records: list[dict[str, str]] = []
    first_key = ""
    for line in text.splitlines():
        if not line.strip():
            continue
        starts_record = not line[0].isspace()
        if starts_record:
            key = line.split("=", 1)[0]
            if not first_key:
                first_key = key
            if key == first_key or not records:
                records.append({})
        parse_scontrol_line(line, records[-1], free_text_reason=first_key == "NodeName")
    return records


def parse_scontrol_line(line: str, record: dict[str, str], *, free_text_reason: bool) -> None:
    last_key = ""
    words = line.strip().split(" ")
    index = 0
    while index < len(words):
        word = words[index]
        key, sep, value = word.partition("=")
        if sep and SCONTROL_KEY.fullmatch(key):
            if key == "Reason" and free_text_reason:
                record[key] = " ".join([value, *words[index + 1 :]]).strip()
                return
            if key not in record:
                record[key] = value
                last_key = key
            else:
                last_key = ""
        elif last_key:
            record[last_key] = f"{record[last_key]} {word}".rstrip()
        index += 1


def node_from_scontrol_record(
    record: Mapping[str, str], local_tz: tzinfo | None = None
) -> NodeInfo:
    base, flags = split_node_state(record.get("State", "").split("+"))
    reason, reason_set_at, reason_set_by = text_reason(record.get("Reason"), local_tz)
    gres = record.get("Gres", "")
    used = tres_gpus(record.get("AllocTRES"))
    if used is None:
        used = gpu_count(record.get("GresUsed"))
    return NodeInfo(
        name=record.get("NodeName", ""),
        state=base,
        flags=flags,
        reason=reason,
        partitions=tuple(
            part for part in text_or_empty(record.get("Partitions")).split(",") if part
        ),
        cpus=first_int(record.get("CPUTot")),
        memory_mb=first_int(record.get("RealMemory")),
        gpus=gpu_count(gres),
        gpu_model=gpu_model(gres),
        gpus_used=used,
        reason_set_at=reason_set_at,
        reason_set_by=reason_set_by,
    )


def parse_scontrol_nodes(text: str, local_tz: tzinfo | None = None) -> list[NodeInfo]:
    records = parse_scontrol_records(text)
    return [
        node_from_scontrol_record(record, local_tz) for record in records if "NodeName" in record
    ]


def partition_from_scontrol_record(record: Mapping[str, str]) -> PartitionInfo:
    max_nodes = record.get("MaxNodes", "UNLIMITED")
    return PartitionInfo(
        name=record.get("PartitionName", ""),
        nodes=expand_hostlist(record.get("Nodes")),
        max_time_minutes=duration_minutes(record.get("MaxTime")),
        max_nodes=None if max_nodes.upper() == "UNLIMITED" else first_int(max_nodes),
        default=record.get("Default", "NO").upper() == "YES",
        state=record.get("State", "UP").lower(),
        total_gpus=tres_gpus(record.get("TRES")) or 0,
    )


def parse_scontrol_partitions(text: str) -> list[PartitionInfo]:
    records = parse_scontrol_records(text)
    return [
        partition_from_scontrol_record(record) for record in records if "PartitionName" in record
    ]


def text_exit_code(value: str | None) -> int:
    """`3:0` -> 3; `0:15` (killed by signal 15) -> 143, as a shell reports it."""
    code, _, signal = (value or "0:0").partition(":")
    if first_int(signal):
        return 128 + first_int(signal)
    return first_int(code)


def text_job_gpus(record: Mapping[str, str], node_count: int) -> int:
    """GPUs of a job from the most precise field present.

    Without `AccountingStorageTRES=gres/gpu` (no slurmdbd) the TRES strings carry
    no GPUs at all, so fall back to `-d`'s JOB_GRES, then the per-node request.
    """
    for key in ("AllocTRES", "TRES"):
        gpus = tres_gpus(record.get(key))
        if gpus is not None:
            return gpus
    if record.get("JOB_GRES"):
        return gpu_count(record["JOB_GRES"])
    requested = tres_gpus(record.get("ReqTRES"))
    if requested is not None:
        return requested
    if record.get("TresPerJob"):
        return gpu_count(record["TresPerJob"])
    return gpu_count(record.get("TresPerNode")) * max(node_count, 1)


def job_from_scontrol_record(record: Mapping[str, str], local_tz: tzinfo | None = None) -> JobInfo:
    state = record.get("JobState", "PENDING")
    node_count = first_int(record.get("NumNodes"))
    reason = text_or_empty(record.get("Reason"))
    return JobInfo(
        job_id=first_int(record.get("JobId")),
        name=text_or_empty(record.get("JobName")),
        user=record.get("UserId", "").split("(", 1)[0],
        account=text_or_empty(record.get("Account")),
        partition=text_or_empty(record.get("Partition")),
        state=state,
        reason=reason,
        nodes=expand_hostlist(record.get("NodeList")),
        node_count=node_count,
        gpus=text_job_gpus(record, node_count),
        submit_time=text_time(record.get("SubmitTime"), local_tz),
        start_time=text_time(record.get("StartTime"), local_tz),
        end_time=text_time(record.get("EndTime"), local_tz),
        eligible_time=text_time(record.get("EligibleTime"), local_tz),
        restart_count=first_int(record.get("Restarts")),
        requeue=record.get("Requeue", "1") == "1",
        batch_host=text_or_empty(record.get("BatchHost")),
        exit_code=None if state in JOB_ACTIVE_STATES else text_exit_code(record.get("ExitCode")),
        time_limit_minutes=duration_minutes(record.get("TimeLimit")),
    )


def parse_scontrol_jobs(text: str, local_tz: tzinfo | None = None) -> list[JobInfo]:
    # "No jobs in the system" is a line without fields; skip anything without a JobId.
    records = parse_scontrol_records(text)
    return [job_from_scontrol_record(record, local_tz) for record in records if "JobId" in record]


# ---------------------------------------------------------------- JSON nodes


def node_state_tokens(raw: Mapping[str, Any]) -> list[str]:
    """22.05 splits the state into `state` + `state_flags`; 24.11 uses one array."""
    state = raw.get("state", "")
    tokens = list(state) if isinstance(state, list) else [str(state)]
    return tokens + list(raw.get("state_flags") or [])


def node_from_json(raw: Mapping[str, Any]) -> NodeInfo:
    base, flags = split_node_state(node_state_tokens(raw))
    gres = raw.get("gres", "")
    return NodeInfo(
        name=raw.get("name", ""),
        state=base,
        flags=flags,
        reason=text_or_empty(raw.get("reason")),
        partitions=tuple(raw.get("partitions") or ()),
        cpus=plain_number(raw.get("cpus")) or 0,
        memory_mb=plain_number(raw.get("real_memory")) or 0,
        gpus=gpu_count(gres),
        gpu_model=gpu_model(gres),
        gpus_used=gpu_count(raw.get("gres_used")),
        reason_set_at=epoch_to_datetime(raw.get("reason_changed_at")),
        reason_set_by=text_or_empty(raw.get("reason_set_by_user")),
    )


def parse_nodes_json(document: Mapping[str, Any]) -> list[NodeInfo]:
    """Nodes from `scontrol show node --json`, 22.05 `sinfo --json`, 24.11
    `sinfo --json` (grouped records) or slurmrestd's `/nodes`."""
    if "sinfo" in document:
        return nodes_from_sinfo_groups(document["sinfo"])
    return [node_from_json(raw) for raw in document.get("nodes", [])]


def nodes_from_sinfo_groups(groups: Iterable[Mapping[str, Any]]) -> list[NodeInfo]:
    """24.11 `sinfo --json` lists (partition, state) groups; a node in two
    partitions appears twice, so merge by name keeping sinfo's order."""
    merged: dict[str, NodeInfo] = {}
    for group in groups:
        for name in group.get("nodes", {}).get("nodes", []):
            node = node_from_sinfo_group(name, group)
            previous = merged.get(name)
            if previous is not None:
                node = NodeInfo(
                    **{**previous.__dict__, "partitions": previous.partitions + node.partitions}
                )
            merged[name] = node
    return list(merged.values())


def node_from_sinfo_group(name: str, group: Mapping[str, Any]) -> NodeInfo:
    base, flags = split_node_state(group.get("node", {}).get("state", []))
    reason = group.get("reason") or {}
    gres = group.get("gres") or {}
    partition = (group.get("partition") or {}).get("name", "")
    return NodeInfo(
        name=name,
        state=base,
        flags=flags,
        reason=text_or_empty(reason.get("description")),
        partitions=(partition,) if partition else (),
        cpus=plain_number(group.get("cpus", {}).get("maximum")) or 0,
        memory_mb=plain_number(group.get("memory", {}).get("maximum")) or 0,
        gpus=gpu_count(gres.get("total")),
        gpu_model=gpu_model(gres.get("total")),
        gpus_used=gpu_count(gres.get("used")),
        reason_set_at=epoch_to_datetime(reason.get("time")),
        reason_set_by=text_or_empty(reason.get("user")),
    )


# ---------------------------------------------------------------- JSON partitions


def partition_from_json(raw: Mapping[str, Any]) -> PartitionInfo:
    """24.11's `scontrol show partition --json` (nested) or 22.05 slurmrestd
    v0.0.38 (flat). 24.11's JSON does not say which partition is the default,
    so callers needing `default` use `scontrol -o show partition` text."""
    if isinstance(raw.get("nodes"), Mapping):
        return PartitionInfo(
            name=raw.get("name", ""),
            nodes=expand_hostlist(raw["nodes"].get("configured")),
            max_time_minutes=plain_number(raw.get("maximums", {}).get("time")),
            max_nodes=plain_number(raw.get("maximums", {}).get("nodes")),
            default="DEFAULT" in (raw.get("flags") or []),
            state=str((raw.get("partition", {}).get("state") or ["UP"])[0]).lower(),
            total_gpus=tres_gpus(raw.get("tres", {}).get("configured")) or 0,
        )
    return PartitionInfo(
        name=raw.get("name", ""),
        nodes=expand_hostlist(raw.get("nodes")),
        max_time_minutes=non_negative(raw.get("max_time_limit")),
        max_nodes=non_negative(raw.get("maximum_nodes_per_job")),
        default="default" in [flag.lower() for flag in raw.get("flags") or []],
        state=str(raw.get("state", "UP")).lower(),
        total_gpus=tres_gpus(raw.get("tres")) or 0,
    )


def non_negative(value: Any) -> int | None:
    """v0.0.38 uses -1 for unlimited."""
    number = plain_number(value)
    return None if number is None or number < 0 else number


def parse_partitions_json(document: Mapping[str, Any]) -> list[PartitionInfo]:
    return [partition_from_json(raw) for raw in document.get("partitions", [])]


# ---------------------------------------------------------------- JSON jobs


def first_state(value: Any) -> str:
    """24.11 job states are arrays (`["PENDING", "REQUEUED"]`); 22.05 strings."""
    if isinstance(value, list):
        return str(value[0]) if value else "PENDING"
    return str(value or "PENDING")


def json_exit_code(value: Any) -> int | None:
    """Exit code as a shell reports it (128 + signal when killed).

    22.05's squeue prints the raw wait status (768 means exit 3); 24.11 and sacct
    print `{status, return_code, signal}` objects.
    """
    if isinstance(value, Mapping):
        signal = plain_number((value.get("signal") or {}).get("id"))
        if signal:
            return 128 + signal
        return plain_number(value.get("return_code"))
    status = plain_number(value)
    if status is None:
        return None
    if status & 0x7F:
        return 128 + (status & 0x7F)
    return status >> 8


def json_job_gpus(raw: Mapping[str, Any], node_count: int) -> int:
    """Allocated GPUs when the job holds some, else what it asked for."""
    allocated = sum(gpu_count(detail) for detail in raw.get("gres_detail") or [])
    if allocated:
        return allocated
    for key in ("tres_alloc_str", "tres_req_str"):
        gpus = tres_gpus(raw.get(key))
        if gpus:
            return gpus
    if raw.get("tres_per_job"):
        return gpu_count(raw["tres_per_job"])
    return gpu_count(raw.get("tres_per_node")) * max(node_count, 1)


def job_time_limit(raw: Mapping[str, Any]) -> int | None:
    value = raw.get("time_limit")
    if is_infinite(value):
        return None
    return plain_number(value)


def job_from_json(raw: Mapping[str, Any]) -> JobInfo:
    """A job from `squeue --json` (22.05 or 24.11) or `scontrol show job --json`."""
    # slurmrestd's /jobs/state lists only `job_id` and `state`.
    state = first_state(raw.get("job_state", raw.get("state")))
    node_count = plain_number(raw.get("node_count")) or 0
    reason = text_or_empty(raw.get("state_reason"))
    return JobInfo(
        job_id=plain_number(raw.get("job_id")) or 0,
        name=raw.get("name", ""),
        user=raw.get("user_name", ""),
        account=raw.get("account", ""),
        partition=raw.get("partition", ""),
        state=state,
        reason=reason,
        nodes=expand_hostlist(raw.get("nodes")),
        node_count=node_count,
        gpus=json_job_gpus(raw, node_count),
        submit_time=epoch_to_datetime(raw.get("submit_time")),
        start_time=epoch_to_datetime(raw.get("start_time")),
        end_time=epoch_to_datetime(raw.get("end_time")),
        eligible_time=epoch_to_datetime(raw.get("eligible_time")),
        restart_count=plain_number(raw.get("restart_cnt")) or 0,
        requeue=bool(raw.get("requeue", True)),
        batch_host=raw.get("batch_host", "") or "",
        exit_code=None if state in JOB_ACTIVE_STATES else json_exit_code(raw.get("exit_code")),
        time_limit_minutes=job_time_limit(raw),
    )


def parse_jobs_json(document: Mapping[str, Any]) -> list[JobInfo]:
    return [job_from_json(raw) for raw in document.get("jobs", [])]


class JobListParser:
    """parse_jobs_json() for a poller: Slurm prints every job on every poll and
    most are unchanged, so a record equal to the previous poll's record of that
    job is answered with the JobInfo parsed then (JobInfo is immutable)."""

    def __init__(self) -> None:
        self._previous: dict[Any, tuple[Mapping[str, Any], JobInfo]] = {}

    def parse(self, document: Mapping[str, Any]) -> list[JobInfo]:
        previous, current, jobs = self._previous, {}, []
        for raw in document.get("jobs", []):
            key = raw.get("job_id")
            seen = previous.get(key)
            job = seen[1] if seen is not None and seen[0] == raw else job_from_json(raw)
            current[key] = (raw, job)
            jobs.append(job)
        self._previous = current
        return jobs


# Every key job_from_json() reads. A 24.11 job record holds about a hundred more
# (6 KB each): decoding only these makes a 5,000-job `scontrol show job --json`
# several times cheaper to read than building every object Slurm printed.
JOB_JSON_KEYS = (
    "job_id",
    "job_state",
    "state",
    "node_count",
    "state_reason",
    "name",
    "user_name",
    "account",
    "partition",
    "nodes",
    "gres_detail",
    "tres_alloc_str",
    "tres_req_str",
    "tres_per_job",
    "tres_per_node",
    "submit_time",
    "start_time",
    "end_time",
    "eligible_time",
    "restart_cnt",
    "requeue",
    "batch_host",
    "exit_code",
    "time_limit",
)
# UNSET keeps "absent" apart from null: job_from_json() falls back only on absent keys.
_JobRecord = msgspec.defstruct("_JobRecord", [(key, Any, msgspec.UNSET) for key in JOB_JSON_KEYS])
_JobList = msgspec.defstruct(
    "_JobList",
    [("jobs", list[_JobRecord], msgspec.UNSET), ("errors", Any, msgspec.UNSET)],
)
_job_list_decoder = msgspec.json.Decoder(_JobList)


def decode_jobs_json(text: str | bytes) -> dict[str, Any]:
    """A job list document (`squeue --json`, `scontrol show job --json`, slurmrestd)
    holding only the keys the job parser and the error check read; absent keys
    stay absent. Raises msgspec.MsgspecError on invalid JSON."""
    return msgspec.to_builtins(_job_list_decoder.decode(text))


# ---------------------------------------------------------------- sacct JSON


def sacct_gpus(raw: Mapping[str, Any]) -> int:
    tres = raw.get("tres") or {}
    for kind in ("allocated", "requested"):
        for item in tres.get(kind) or []:
            if item.get("type") == "gres" and item.get("name") == "gpu":
                return plain_number(item.get("count")) or 0
    return 0


def sacct_time_limit(raw: Mapping[str, Any]) -> int | None:
    limit = (raw.get("time") or {}).get("limit")
    if is_infinite(limit):
        return None
    return plain_number(limit)


def job_from_sacct_json(raw: Mapping[str, Any]) -> JobInfo:
    """One accounting record. A requeued job has one record per attempt; the
    earlier ones have state REQUEUED (24.11: `["PENDING", "REQUEUED"]`)."""
    state_field = raw.get("state") or {}
    current = state_field.get("current")
    if isinstance(current, list) and "REQUEUED" in current:
        state = "REQUEUED"
    else:
        state = first_state(current)
    times = raw.get("time") or {}
    nodes = expand_hostlist(raw.get("nodes"))
    return JobInfo(
        job_id=plain_number(raw.get("job_id")) or 0,
        name=raw.get("name", ""),
        user=raw.get("user", ""),
        account=raw.get("account", ""),
        partition=raw.get("partition", ""),
        state=state,
        reason=text_or_empty(state_field.get("reason")),
        nodes=nodes,
        node_count=len(nodes),
        gpus=sacct_gpus(raw),
        submit_time=epoch_to_datetime(times.get("submission")),
        start_time=epoch_to_datetime(times.get("start")),
        end_time=epoch_to_datetime(times.get("end")),
        eligible_time=epoch_to_datetime(times.get("eligible")),
        restart_count=plain_number(raw.get("restart_cnt")) or 0,
        requeue=True,
        batch_host=nodes[0] if nodes else "",
        exit_code=None if state in JOB_ACTIVE_STATES else json_exit_code(raw.get("exit_code")),
        time_limit_minutes=sacct_time_limit(raw),
    )


def parse_sacct_json(document: Mapping[str, Any]) -> list[JobInfo]:
    return [job_from_sacct_json(raw) for raw in document.get("jobs", [])]


# ---------------------------------------------------------------- slurm.conf


def parse_slurm_conf_partitions(text: str) -> dict[str, tuple[str, ...]]:
    """Partition name -> configured node names, from slurm.conf's PartitionName lines.

    Membership changed with `scontrol update partitionname=...` is lost on
    reconfigure or restart, so this is what the cluster falls back to.
    """
    partitions: dict[str, tuple[str, ...]] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line.lower().startswith("partitionname="):
            continue
        fields = {}
        for word in line.split():
            key, _, value = word.partition("=")
            fields[key.lower()] = value.strip('"')
        name = fields.get("partitionname", "")
        if name and name.upper() != "DEFAULT":
            partitions[name] = expand_hostlist(fields.get("nodes", ""))
    return partitions


def parse_slurm_version(text: str) -> tuple[int, int]:
    """`slurm-wlm 22.05.8` or `slurm 24.11.5` -> (22, 5)."""
    match = re.search(r"(\d+)\.(\d+)", text)
    if not match:
        raise ValueError(f"no Slurm version in {text!r}")
    return int(match.group(1)), int(match.group(2))


# ---------------------------------------------------------------- scontrol show config

PRIVATE_DATA_KINDS = frozenset(
    {"accounts", "cloud", "events", "jobs", "nodes", "partitions", "reservations", "usage", "users"}
)


def parse_private_data(config_text: str) -> frozenset[str]:
    """What `PrivateData = jobs,usage` in `scontrol show config` hides; empty for `none`.

    slurm.conf also accepts `all`; the controller expands it before printing,
    but an older or patched one may not, so `all` reads as every kind.
    """
    for line in config_text.splitlines():
        key, sep, value = line.partition("=")
        if not sep or key.strip().lower() != "privatedata":
            continue
        kinds = {word.strip().lower() for word in value.split(",")} - {"", "none", "(null)"}
        return PRIVATE_DATA_KINDS if "all" in kinds else frozenset(kinds)
    return frozenset()
