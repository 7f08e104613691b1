"""Chaos: PostgreSQL stops under a running portal while a real agent keeps sending.

The portal (daphne) runs on a private PostgreSQL; `medbay-agent run` follows a
kernel log and posts its events. While PostgreSQL is down the portal answers
with server errors and the agent spools; when it returns, every line appended
is stored exactly once (no loss, no doubles).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from tests.chaos.conftest import ChaosPortal
from tests.health.live_portal import (
    AgentProcess,
    ServerDatabase,
    kernel_log_line,
    wait_for,
)
from tests.health.test_agent_to_portal import spooled

pytestmark = pytest.mark.integration

# The agent's backoff doubles from 1 s; a few seconds of outage costs a few more.
RESEND_TIMEOUT_S = 40
BEFORE = [(79, "0000:5d:00", "GPU has fallen off the bus.")]
DURING = [
    (48, "0000:18:00", "An uncorrectable double bit error (DBE) has been detected on GPU"),
    (94, "0000:2a:00", "Contained ECC error."),
    (13, "0000:9a:00", "Graphics SM Warp Exception on (GPC 1, TPC 0, SM 0)"),
    (31, "0000:ab:00", "Ch 0000000a, intr 00000000. MMU Fault: ENGINE GRAPHICS faulted"),
    (74, "0000:db:00", "NVLink: fatal error detected on link 3"),
]


@pytest.fixture
def portal(private_postgres, tmp_path):
    url = private_postgres.create_database("medbay_chaos")
    database = ServerDatabase(url=url, admin_url=private_postgres.url(), name="medbay_chaos")
    server = ChaosPortal(database, tmp_path)
    try:
        server.seed(nodes=8)
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def agent(portal, tmp_path):
    process = AgentProcess(
        node="gpu-02",
        portal_url=portal.url,
        token_file=portal.issue_token("gpu-02"),
        kmsg=tmp_path / "kern.log",
        spool=tmp_path / "spool",
    )
    process.start()
    yield process
    process.stop()


def stored(portal) -> tuple[int, int, int]:
    """(event rows, events counted by folding, event ids received) for gpu-02."""
    rows, counted = (
        portal.database.scalar(
            f"SELECT {what} FROM health_healthevent e JOIN clusters_node n ON n.id = e.node_id"
            " WHERE n.name = %s",
            "gpu-02",
        )
        for what in ("COUNT(*)", "COALESCE(SUM(e.count), 0)")
    )
    received = portal.database.scalar(
        "SELECT COUNT(*) FROM health_receivedeventid r JOIN clusters_node n ON n.id = r.node_id"
        " WHERE n.name = %s",
        "gpu-02",
    )
    return rows, counted, received


def write(agent, lines, start: datetime) -> None:
    for offset, (xid, pci, message) in enumerate(lines):
        at = start + timedelta(milliseconds=offset)
        agent.write(kernel_log_line("gpu-02", at, pci, xid, message))


def test_events_sent_while_postgres_is_down_are_stored_once_after_it_returns(
    portal, agent, private_postgres
):
    write(agent, BEFORE, datetime.now(UTC))
    wait_for(lambda: stored(portal) == (1, 1, 1), 20, "the first event")
    # The portal commits before the agent reads its answer: stop PostgreSQL only once
    # the agent has the acknowledgement, so that the outage's lines are all it holds.
    wait_for(lambda: spooled(agent) == (1, 0), 10, "the agent to acknowledge")

    private_postgres.stop()
    try:
        outage_started = time.monotonic()
        write(agent, DURING, datetime.now(UTC))
        wait_for(lambda: "portal unavailable" in agent.output(), 20, "a failed send")
        # Every line is read into the spool and held there while the portal cannot store it.
        wait_for(lambda: spooled(agent)[1] == len(DURING), 10, "the outage's lines spooled")
    finally:
        private_postgres.start()
    assert time.monotonic() - outage_started < 30

    total = len(BEFORE) + len(DURING)
    wait_for(lambda: stored(portal) == (total, total, total), RESEND_TIMEOUT_S, "the spool")
    wait_for(lambda: spooled(agent) == (total, 0), 10, "the agent to acknowledge")
    time.sleep(2)  # a late duplicate resend would show up now
    assert stored(portal) == (total, total, total)
