"""`dcgmi health -c` box-output parsing (§2.3 of reference/gpu-faults.md).

The report is a two-column tree drawn with `->` arrows:

    | Overall Health            | Failure                                                  |
    | GPU                       |                                                          |
    | -> 1                      | Failure                                                  |
    |    -> Errors              |                                                          |
    |       -> Memory system    | Failure                                                  |
    |                           | Detected 1 volatile double-bit ECC error(s) in GPU 1.    |

Messages are wrapped at the column width, mid-word, so full-width pieces are glued back.
"""

import enum
import re
from dataclasses import dataclass, field


class HealthStatus(enum.StrEnum):
    HEALTHY = "healthy"
    WARNING = "warning"
    FAILURE = "failure"


_STATUS_WORDS = {
    "healthy": HealthStatus.HEALTHY,
    "pass": HealthStatus.HEALTHY,
    "warning": HealthStatus.WARNING,
    "warn": HealthStatus.WARNING,
    "failure": HealthStatus.FAILURE,
    "fail": HealthStatus.FAILURE,
}

_ROW_RE = re.compile(r"^\|(?P<left>[^|]*)\|(?P<right>.*)\|\s*$")
_ARROW_RE = re.compile(r"^(?P<indent> *)-> (?P<label>.+?)\s*$")


@dataclass
class SystemHealth:
    """One subsystem's verdict under a GPU, e.g. "Memory system: Failure" with messages."""

    system: str
    status: HealthStatus | None
    messages: list[str] = field(default_factory=list)


@dataclass
class EntityHealth:
    """One GPU (or other entity group member, e.g. an NvSwitch) and its subsystems."""

    group: str
    entity_id: str
    status: HealthStatus | None
    systems: list[SystemHealth] = field(default_factory=list)


@dataclass
class HealthReport:
    overall: HealthStatus | None
    entities: list[EntityHealth] = field(default_factory=list)

    @property
    def messages(self) -> list[str]:
        return [m for entity in self.entities for system in entity.systems for m in system.messages]


def parse_status(word: str) -> HealthStatus | None:
    return _STATUS_WORDS.get(word.strip().lower())


def parse_health(text: str) -> HealthReport:
    """Parse `dcgmi health -c` output. Unknown rows are ignored; overall None if absent."""
    report = HealthReport(overall=None)
    group = "GPU"
    entity: EntityHealth | None = None
    system: SystemHealth | None = None
    previous_piece = ""
    for left, right, width in _rows(text):
        label = left.strip()
        if label == "Overall Health":
            report.overall = parse_status(right)
            continue
        arrow = _ARROW_RE.match(left)
        if arrow is None and label:
            group, entity, system = label, None, None
            continue
        if arrow is not None:
            depth = len(arrow["indent"]) // 3
            if depth == 0:
                entity = EntityHealth(group, arrow["label"], parse_status(right))
                report.entities.append(entity)
                system = None
            elif entity is not None and right.strip():
                system = SystemHealth(arrow["label"], parse_status(right))
                entity.systems.append(system)
            previous_piece = ""
            continue
        if system is not None and right.strip():
            _add_message_piece(system, right, previous_piece, width)
            previous_piece = right
    return report


def _rows(text: str):
    """(left cell, right cell without its padding spaces, right cell width) per table row."""
    for line in text.splitlines():
        match = _ROW_RE.match(line.rstrip())
        if match is None:
            continue
        right = match["right"]
        yield match["left"][1:], right[1:-1] if len(right) >= 2 else right.strip(), len(right) - 2


def _add_message_piece(system: SystemHealth, piece: str, previous: str, width: int) -> None:
    # The wrapper cuts at exactly the column width, so a previous piece that fills the column
    # (or all but a trailing space) was cut mid-message: glue this piece to it.
    filled = len(previous.rstrip())
    if system.messages and previous and filled >= width - 1:
        separator = "" if filled >= width else " "
        system.messages[-1] = " ".join((system.messages[-1] + separator + piece).split())
    else:
        system.messages.append(" ".join(piece.split()))


@dataclass(frozen=True)
class DiagTest:
    name: str
    result: str  # "pass" | "fail" | "warn" | "skip"
    detail: str


_DIAG_RESULTS = {"pass", "fail", "warn", "skip"}


def parse_diag(text: str) -> list[DiagTest]:
    """The per-test rows of `dcgmi diag -r N` output (`| GPU Memory | Fail - GPU: 1 |`)."""
    tests = []
    for left, right, _width in _rows(text):
        words = right.split()
        if words and words[0].lower() in _DIAG_RESULTS and left.strip():
            detail = right.strip()[len(words[0]) :].strip(" -")
            tests.append(DiagTest(left.strip(), words[0].lower(), detail))
    return tests
