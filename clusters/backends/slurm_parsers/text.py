"""Slurm's text output: `scontrol -o show node|partition|job`, slurm.conf, its config."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, tzinfo

from clusters.backends.base import (
    JOB_ACTIVE_STATES,
    JobInfo,
    NodeInfo,
    PartitionInfo,
)
from clusters.backends.slurm_parsers.values import (
    SCONTROL_KEY,
    first_int,
    gpu_count,
    gpu_model,
    split_node_state,
    text_or_empty,
    text_reason,
    text_time,
    tres_gpus,
)
from clusters.backends.slurm_syntax import duration_minutes, expand_hostlist

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


# ---------------------------------------------------------------- slurm.conf


def parse_slurm_conf_partitions(text: str) -> dict[str, tuple[str, ...]]:
    """Partition name -> configured node names, from slurm.conf's PartitionName lines.

    Membership changed with `scontrol update partitionname=...` is lost on
    reconfigure or restart, so this is what the cluster falls back to.
    """
    partitions: dict[str, tuple[str, ...]] = {}
    for fields in _slurm_conf_lines(text, "partitionname"):
        name = fields.get("partitionname", "")
        if name and name.upper() != "DEFAULT":
            partitions[name] = expand_hostlist(fields.get("nodes", ""))
    return partitions


def parse_slurm_conf_node_addresses(text: str) -> tuple[str, ...]:
    """Every configured node's address, from slurm.conf's NodeName lines: its NodeAddr,
    else its NodeHostname, else its name, as Slurm itself resolves a node. A
    `NodeName=DEFAULT` line sets values for the lines after it."""
    addresses: list[str] = []
    defaults: dict[str, str] = {}
    for fields in _slurm_conf_lines(text, "nodename"):
        name = fields.get("nodename", "")
        if name.upper() == "DEFAULT":
            defaults.update(fields)
            continue
        fields = {**defaults, **fields}
        if name:
            address = fields.get("nodeaddr") or fields.get("nodehostname") or name
            addresses.extend(expand_hostlist(address))
    return tuple(addresses)


def _slurm_conf_lines(text: str, key: str) -> list[dict[str, str]]:
    """The `KEY=...` lines of slurm.conf, as lower-case key -> value."""
    found = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line.lower().startswith(key + "="):
            continue
        fields = {}
        for word in line.split():
            name, _, value = word.partition("=")
            fields[name.lower()] = value.strip('"')
        found.append(fields)
    return found


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


def parse_squeue_starts(text: str, local_tz: tzinfo | None = None) -> dict[int, datetime]:
    """Job id -> expected start from `squeue --start --noheader --format=%i|%S`.

    Slurm prints `N/A` for a job it has no estimate for yet (the backfill scheduler has
    not looked at it), and `123_[1-4]` for a pending array's tasks: both are left out.
    """
    starts: dict[int, datetime] = {}
    for line in text.splitlines():
        job_id, sep, when = line.strip().partition("|")
        if not sep or not job_id.isdigit():
            continue
        at = text_time(when, local_tz)
        if at is not None:
            starts[int(job_id)] = at
    return starts
