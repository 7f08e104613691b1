"""Slurm's hostlist and duration notations, parsed in one place.

medbay-launch (jobs/launcher.py) runs inside Slurm jobs on compute nodes, where
only the standard library may be imported, so this module imports nothing else;
the output parsers (slurm_parsers/) and the simulator read the same notations
through it. It sits outside slurm_parsers/ because that package's __init__ loads
every parser and msgspec with them.
"""

from __future__ import annotations

import re
from functools import lru_cache

# Tokens Slurm prints instead of a time or a value.
TEXT_NONE_VALUES = frozenset({"", "(null)", "None", "Unknown", "N/A", "NONE", "n/a"})

HOST_RANGE = re.compile(r"\[([^\]]*)\]")
# Slurm repeats the same GRES, TRES and hostlist strings across thousands of
# records; their parsed forms are immutable, so each distinct string is parsed once.
PARSE_CACHE_SIZE = 4096


# ---------------------------------------------------------------- durations


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


# ---------------------------------------------------------------- hostlists


def expand_hostlist(expression: str | None) -> tuple[str, ...]:
    """Node names from a Slurm hostlist, in order: `gpu-[01-03,05]`, `node[1-2]-ib`, `a,b`."""
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
    """A later bracket (`rack[1-2]-node[01-02]`) expands as a cartesian product."""
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
    """`01-03` keeps its zero padding, as Slurm does: 01, 02, 03."""
    if "-" not in item:
        return [item]
    start, end = item.split("-", 1)
    width = len(start)
    return [str(number).zfill(width) for number in range(int(start), int(end) + 1)]
