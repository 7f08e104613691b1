"""Finished job attempts from `sacct --json` (slurmdbd's accounting records).

Both generations, told apart by shape:

- 22.05 (`openapi/dbv0.0.38`): `state.current` is a string, times plain epochs,
  and `exit_code` is `{"status": "SUCCESS", "return_code": 0}` for every job,
  failed ones included (measured on 22.05.8: a job that ran `exit 3` prints
  SUCCESS/0 here while `sacct -o ExitCode` says 3:0). Such an exit code is
  believed only for COMPLETED jobs; otherwise it is unknown (None).
- 23.02 and later (samples from 24.11): state arrays (`["PENDING", "REQUEUED"]`
  for an earlier attempt of a requeued job), `{set, infinite, number}` numbers,
  exit-code objects with a status list, and `restart_cnt`.

A 22.05 record carries its steps and about thirty other keys; only the keys
read here are decoded (msgspec skips the rest without building objects), which
is what lets an import read tens of thousands of records a second.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from clusters.backends.base import AccountingRecord
from clusters.backends.slurm_parsers.json_jobs import json_exit_code
from clusters.backends.slurm_parsers.values import (
    epoch_to_datetime,
    plain_number,
)
from clusters.backends.slurm_syntax import expand_hostlist


class _Tres(msgspec.Struct, frozen=True):
    type: Any = None
    name: Any = None
    count: Any = None


class _TresSets(msgspec.Struct, frozen=True):
    allocated: tuple[_Tres, ...] = ()


class _Times(msgspec.Struct, frozen=True):
    submission: Any = None
    start: Any = None
    end: Any = None
    elapsed: Any = None


class _State(msgspec.Struct, frozen=True):
    current: Any = None


class _Record(msgspec.Struct):
    job_id: Any = None
    name: Any = ""
    user: Any = ""
    account: Any = ""
    partition: Any = ""
    qos: Any = ""
    cluster: Any = ""
    state: _State = _State()
    time: _Times = _Times()
    tres: _TresSets = _TresSets()
    nodes: Any = None
    exit_code: Any = None
    restart_cnt: Any = msgspec.UNSET


class _Document(msgspec.Struct):
    jobs: list[_Record] = []
    errors: Any = None


_decoder = msgspec.json.Decoder(_Document)


class AccountingParseError(ValueError):
    """sacct printed something that is not an accounting document."""


def decode_accounting_json(text: str | bytes) -> list[AccountingRecord]:
    """Records from the text `sacct --json` printed; raises AccountingParseError."""
    try:
        document = _decoder.decode(text)
    except msgspec.MsgspecError as error:
        raise AccountingParseError(f"sacct printed invalid JSON: {error}") from error
    return _records(document)


def parse_accounting_json(document: Mapping[str, Any]) -> list[AccountingRecord]:
    """Records from an already-decoded `sacct --json` (or slurmdbd REST) document."""
    try:
        converted = msgspec.convert(document, _Document)
    except msgspec.MsgspecError as error:
        raise AccountingParseError(f"not an accounting document: {error}") from error
    return _records(converted)


# 22.05 answers an empty window with an error ("Nothing found", 9003) and exit 0.
NOTHING_FOUND = 9003


def accounting_errors(text: str | bytes) -> list[str]:
    """The messages of the document's `errors` array, less "Nothing found"."""
    try:
        errors = _decoder.decode(text).errors
    except msgspec.MsgspecError:
        return []
    return [_error_message(item) for item in errors or [] if not _nothing_found(item)]


def _nothing_found(item: Any) -> bool:
    return isinstance(item, dict) and (
        item.get("error_number") == NOTHING_FOUND
        or str(item.get("description", "")).startswith("Nothing found")
    )


def _error_message(item: Any) -> str:
    if isinstance(item, dict):
        return str(item.get("description") or item.get("error") or item)
    return str(item)


def _records(document: _Document) -> list[AccountingRecord]:
    records = []
    for raw in document.jobs:
        record = _record(raw)
        if record is not None:
            records.append(record)
    return records


def _state(current: Any) -> str:
    if isinstance(current, list):
        if "REQUEUED" in current:
            return "REQUEUED"
        return str(current[0]) if current else "PENDING"
    return str(current or "PENDING")


def _exit_code(value: Any, state: str) -> int | None:
    if isinstance(value, Mapping) and isinstance(value.get("status"), str):
        # The 22.05 shape, whose code is always SUCCESS/0 (see the module docstring).
        return 0 if state == "COMPLETED" else None
    return json_exit_code(value)


def _gpus(tres: _TresSets) -> int:
    for item in tres.allocated:
        if item.type == "gres" and item.name == "gpu":
            return plain_number(item.count) or 0
    return 0


def _record(raw: _Record) -> AccountingRecord | None:
    job_id = plain_number(raw.job_id)
    submitted = epoch_to_datetime(raw.time.submission)
    if not job_id or submitted is None:
        return None  # nothing can name it; Slurm writes both for every real job
    state = _state(raw.state.current)
    restarts = None if raw.restart_cnt is msgspec.UNSET else plain_number(raw.restart_cnt)
    return AccountingRecord(
        cluster=raw.cluster or "",
        job_id=job_id,
        submit_time=submitted,
        name=raw.name or "",
        user=raw.user or "",
        account=raw.account or "",
        partition=raw.partition or "",
        qos=raw.qos or "",
        state=state,
        start_time=epoch_to_datetime(raw.time.start),
        end_time=epoch_to_datetime(raw.time.end),
        elapsed_s=plain_number(raw.time.elapsed) or 0,
        gpus=_gpus(raw.tres),
        nodes=expand_hostlist(raw.nodes) if isinstance(raw.nodes, str) else (),
        exit_code=_exit_code(raw.exit_code, state),
        restart_count=restarts,
    )
