"""Delivers spooled events to the portal in order, in batches, with backoff.

Response handling: 2xx accepted (ack), 408/429/5xx and network errors retried later,
any other status (4xx, and 3xx which means a wrong portal URL) treated per `_classify`.
"""

import enum
import json
import logging
import random
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from agent.schema import MAX_BATCH
from agent.spool import Spool

log = logging.getLogger(__name__)

EVENTS_PATH = "/api/v1/health/events/"
_RETRYABLE_STATUSES = {408, 429}


class Outcome(enum.StrEnum):
    ACCEPTED = "accepted"
    RETRY = "retry"
    REJECTED = "rejected"


@dataclass(frozen=True)
class Response:
    outcome: Outcome
    detail: str


def events_url(portal: str) -> str:
    return portal.rstrip("/") + EVENTS_PATH


def post_events(url: str, token: str, node: str, events: list[dict], timeout_s: float) -> Response:
    body = json.dumps({"node": node, "events": events}).encode()
    request = urllib.request.Request(  # noqa: S310 - the URL is the operator-configured portal
        url,
        data=body,
        method="POST",
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as reply:  # noqa: S310
            return Response(Outcome.ACCEPTED, reply.read(2048).decode(errors="replace"))
    except urllib.error.HTTPError as error:
        return _classify(error.code, error.read(2048).decode(errors="replace"))
    except (urllib.error.URLError, OSError) as error:
        return Response(Outcome.RETRY, f"connection failed: {error}")


def _classify(status: int, body: str) -> Response:
    detail = f"HTTP {status}: {body[:300]}"
    if status in _RETRYABLE_STATUSES or status >= 500:
        return Response(Outcome.RETRY, detail)
    if 400 <= status < 500:
        return Response(Outcome.REJECTED, detail)
    # Redirects mean a misconfigured portal URL: keep the events until someone fixes it.
    return Response(Outcome.RETRY, detail)


@dataclass
class Backoff:
    initial_s: float = 1.0
    maximum_s: float = 60.0
    delay_s: float = 0.0
    not_before: float = 0.0

    def ready(self, now: float) -> bool:
        return now >= self.not_before

    def failed(self, now: float) -> None:
        self.delay_s = min(self.maximum_s, max(self.initial_s, self.delay_s * 2))
        # Jitter so a whole cluster does not retry in lock-step after a portal outage.
        self.not_before = now + self.delay_s * random.uniform(0.8, 1.2)

    def succeeded(self) -> None:
        self.delay_s = 0.0
        self.not_before = 0.0


@dataclass
class Sender:
    spool: Spool
    portal: str
    token: str
    node: str
    batch_size: int = MAX_BATCH
    timeout_s: float = 10.0
    backoff: Backoff = field(default_factory=Backoff)

    def flush(self, now: float | None = None) -> int:
        """Send pending batches until the spool is empty or a send fails; returns events sent."""
        now = time.monotonic() if now is None else now
        if not self.backoff.ready(now):
            return 0
        sent = 0
        limit = max(1, min(self.batch_size, MAX_BATCH))
        while (batch := self.spool.next_batch(limit)).events:
            response = post_events(
                events_url(self.portal), self.token, self.node, batch.events, self.timeout_s
            )
            if response.outcome == Outcome.RETRY:
                log.warning("portal unavailable, will retry: %s", response.detail)
                self.backoff.failed(time.monotonic())
                return sent
            if response.outcome == Outcome.REJECTED:
                path = self.spool.reject(batch, response.detail)
                log.error("portal refused %d events (%s); kept in %s",
                          len(batch.events), response.detail, path)  # fmt: skip
            else:
                self.spool.acknowledge(batch.end)
                sent += len(batch.events)
            self.backoff.succeeded()
        return sent
