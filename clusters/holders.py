"""Who holds a node out of service, read from Slurm's reason: Medbay, an admin,
HealthCheckProgram or Slurm itself.

Medbay is not the only one who drains nodes, and Slurm keeps one reason per node.
When Medbay drains a node someone else already holds, it appends that party's
reason to its own (`medbay: … [run 7] | held: maint PSU swap (root, 09:15)`), so
`sinfo -R` still shows it, and restores the other party's reason instead of
resuming when it is done. A controller that undrains nodes it did not drain is the
failure this module exists to prevent (Slinky PR #3). Plain Python: the sync, the
steps and the spare-pool driver all read it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from clusters.backends.base import NodeInfo

MEDBAY_RUN = re.compile(r"\[run (\d+)\]")
HELD_SEPARATOR = " | held: "
# Slurm's reason is free text; keep it to what the database and `sinfo -R` show whole.
REASON_MAX = 255
# Reasons Slurm itself sets (node_mgr.c, slurmd); a person did not drain these.
SLURM_REASONS = (
    "Not responding",
    "Node unexpectedly rebooted",
    "Prolog error",
    "Epilog error",
    "Kill task failed",
    "reboot timed out",
    "Reboot ASAP",
    "batch job complete failure",
    "Low RealMemory",
    "Low socket*core*thread count",
    "gres/gpu count",
)
HEALTHCHECK_PREFIX = "medbay:"
QUARANTINE_PREFIX = "medbay: quarantined"


@dataclass(frozen=True)
class Holder:
    """One party holding a node out of service, and why."""

    kind: str  # "medbay", "admin", "healthcheck", "slurm"
    who: str
    reason: str
    at: datetime | None = None
    run_id: int | None = None

    def describe(self) -> str:
        """`maint PSU swap (root, 09:15)`: what the board and the run's last words say."""
        details = [part for part in (self.who, _clock(self.at)) if part]
        return f"{self.reason} ({', '.join(details)})" if details else self.reason

    def as_dict(self) -> dict:
        return {
            "kind": self.kind,
            "who": self.who,
            "reason": self.reason,
            "at": self.at.isoformat() if self.at else None,
            "text": self.describe(),
        }


def out_of_service(info: NodeInfo | None) -> bool:
    return info is not None and (info.state == "down" or bool(info.flags & {"drain", "fail"}))


def is_medbays(reason: str) -> bool:
    """A reason Medbay's engine wrote (`… [run N]`), possibly with others' appended."""
    own = reason.split(HELD_SEPARATOR, 1)[0]
    if own.startswith(QUARANTINE_PREFIX):
        return True
    return own.startswith("medbay:") and bool(MEDBAY_RUN.search(own))


def run_named(reason: str) -> int | None:
    """The run a reason of Medbay's names (`… [run 12] | held: …` -> 12), else None."""
    found = MEDBAY_RUN.search(reason.split(HELD_SEPARATOR, 1)[0])
    return int(found.group(1)) if found else None


def holders(info: NodeInfo | None) -> list[Holder]:
    """Everyone holding the node out of service, Medbay included; [] when in service."""
    if not out_of_service(info) or not info.reason:
        return []
    if is_medbays(info.reason):
        own, _, others = info.reason.partition(HELD_SEPARATOR)
        medbay = Holder("medbay", "Medbay", own, info.reason_set_at, run_named(own))
        appended = [Holder(_kind_of(text), "", text) for text in others.split("; ") if text]
        return [medbay, *appended]
    kind = _kind_of(info.reason)
    who = (
        info.reason_set_by
        if kind == "admin"
        else {"healthcheck": "HealthCheckProgram"}.get(kind, info.reason_set_by or "Slurm")
    )
    return [Holder(kind, who or "an admin", info.reason, info.reason_set_at)]


def other_holders(info: NodeInfo | None) -> list[Holder]:
    return [holder for holder in holders(info) if holder.kind != "medbay"]


def describe(held: list[Holder] | list[dict]) -> str:
    return "; ".join(h["text"] if isinstance(h, dict) else h.describe() for h in held)


def combined(medbay_reason: str, held: list[dict]) -> str:
    """Medbay's reason with the other parties' appended, within REASON_MAX."""
    if not held:
        return medbay_reason[:REASON_MAX]
    text = f"{medbay_reason}{HELD_SEPARATOR}{describe(held)}"
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 1] + "…"


def original_reason(held: list[dict]) -> str:
    """The other parties' own words, to put back when Medbay is done."""
    return "; ".join(h["reason"] for h in held if h.get("reason"))[:REASON_MAX]


def _kind_of(reason: str) -> str:
    if reason.startswith(HEALTHCHECK_PREFIX):
        return "healthcheck"
    if any(reason.startswith(prefix) for prefix in SLURM_REASONS):
        return "slurm"
    return "admin"


def _clock(at: datetime | None) -> str:
    return at.astimezone().strftime("%H:%M") if at else ""
