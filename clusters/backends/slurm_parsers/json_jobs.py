"""Jobs from `squeue --json`, `scontrol show job --json` and `sacct --json`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from clusters.backends.base import (
    JOB_ACTIVE_STATES,
    JobInfo,
)
from clusters.backends.slurm_parsers.values import (
    epoch_to_datetime,
    gpu_count,
    is_infinite,
    plain_number,
    text_or_empty,
    tres_gpus,
)
from clusters.backends.slurm_syntax import expand_hostlist

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
    [
        ("jobs", list[_JobRecord], msgspec.UNSET),
        ("errors", Any, msgspec.UNSET),
        ("warnings", Any, msgspec.UNSET),  # slurmrestd's "No job changes since ..."
        ("last_update", Any, msgspec.UNSET),
    ],
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
