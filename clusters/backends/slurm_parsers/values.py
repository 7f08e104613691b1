"""Small values Slurm prints in both generations: numbers and sentinels, times,
GRES and TRES, node states. Hostlists and durations are read by
clusters/backends/slurm_syntax.py, which the job launcher shares."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from functools import lru_cache
from typing import Any

from clusters.backends.base import (
    NODE_BASE_STATES,
)
from clusters.backends.slurm_syntax import PARSE_CACHE_SIZE, TEXT_NONE_VALUES, split_top_level

# Slurm's NO_VAL/INFINITE sentinels; they mean "not set", never a real epoch.
UNSET_NUMBERS = frozenset({4294967294, 4294967295, 18446744073709551614, 18446744073709551615})

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
GRES_SUFFIX = re.compile(r"\(.*?\)")
GRES_PREFIX = re.compile(r"^gres[:/]")
REASON_STAMP = re.compile(r"^(.*?)\s*\[([^@\]]*)@([^\]]+)\]\s*$")
SCONTROL_KEY = re.compile(r"[A-Za-z_][\w:/]*")


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


def text_or_empty(value: Any) -> str:
    if value is None or value == "":
        return ""
    text = str(value).strip()
    return "" if text in {"(null)", "None", "N/A"} else text


def first_int(value: str | None, default: int = 0) -> int:
    """The leading integer of `4-4`, `2`, `alice(2001)`-style values."""
    match = LEADING_INT.match(value or "")
    return int(match.group(1)) if match else default


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
