"""The `medbay-agent run` loop: follow the kernel log, spool events, run checks, send."""

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime

from agent.checks import DEEP_CHECKS, DEEP_DCGM_LEVEL, CheckContext, run_checks, select_checks
from agent.checks.deep import deep_summary, held_since
from agent.events import XidEventBuilder, check_event
from agent.parsers.kmsg import KmsgParser
from agent.sender import Sender
from agent.spool import Spool

log = logging.getLogger(__name__)

IDLE_WAIT_S = 0.5


@dataclass
class AgentLoop:
    follower: object  # FileFollower or KmsgFollower
    parser: KmsgParser
    builder: XidEventBuilder
    spool: Spool
    sender: Sender
    check_context: CheckContext | None = None
    check_interval_s: float = 0.0
    check_names: list[str] | None = None
    _next_check_at: float = field(default=0.0)
    _deep_done_for: str | None = field(default=None)

    def step(self, now: float | None = None) -> None:
        """One pass: read new log lines, run checks when due, send what is spooled."""
        now = time.monotonic() if now is None else now
        records = [
            record for line in self.follower.read_lines() for record in self.parser.feed(line)
        ]
        # Spool first: an event is durable before any attempt to send it.
        self.spool.append(self.builder.build(records))
        if self._checks_due(now):
            self._run_checks(now)
        self.sender.flush(now)

    def _checks_due(self, now: float) -> bool:
        return (
            bool(self.check_interval_s)
            and self.check_context is not None
            and (now >= self._next_check_at)
        )

    def _run_checks(self, now: float) -> None:
        self._next_check_at = now + self.check_interval_s
        context = CheckContext(**{**vars(self.check_context), "cache": {}})
        held = held_since(context)
        if held is not None and held != self._deep_done_for:
            # Medbay holds this node out of the scheduler's reach to check it before it
            # takes jobs: the deep checks, once per hold, and their verdict as one event.
            self._deep_done_for = held
            config = {**context.config, "dcgm": {"diag_level": DEEP_DCGM_LEVEL,
                                                 **context.section("dcgm")}}  # fmt: skip
            context = CheckContext(**{**vars(context), "config": config})
            results = run_checks(select_checks(list(DEEP_CHECKS)), context)
            results.append(deep_summary(results))
        else:
            results = run_checks(select_checks(self.check_names), context)
        observed_at = datetime.now().astimezone()
        self.spool.append([check_event(result, observed_at=observed_at) for result in results])

    def run_forever(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.step()
            except OSError:
                log.exception("agent step failed; continuing")
            self.follower.wait(IDLE_WAIT_S)
