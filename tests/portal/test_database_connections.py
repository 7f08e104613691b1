"""A burst of agent reports on a real portal (daphne) holds a bounded number of
PostgreSQL connections.

Under daphne every request runs its view in a thread of its own. With a persistent
connection per thread (DB_CONN_MAX_AGE) alone, each concurrent report opened one more
connection, and a fault storm ended in PostgreSQL's "too many clients" and 500s to
the agents. The portal's connection pool (DB_POOL_MAX_SIZE) keeps a process at its size.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from datetime import UTC, datetime

import pytest

from tests.conftest import require_postgres
from tests.health.live_portal import PortalServer, ServerDatabase

pytestmark = pytest.mark.integration

POOL_SIZE = 3
REPORTS = 96
SENDERS = 24


class PooledPortal(PortalServer):
    def environment(self) -> dict[str, str]:
        return {**super().environment(), "DB_POOL_MAX_SIZE": str(POOL_SIZE)}


@pytest.fixture
def portal(tmp_path):
    database = ServerDatabase.create(tmp_path)
    require_postgres(bool(database.name))
    server = PooledPortal(database, tmp_path)
    try:
        server.seed(nodes=4)
        server.start()
        yield server
    finally:
        server.stop()
        database.drop()


def test_a_burst_of_reports_borrows_from_the_pool_instead_of_a_connection_each(portal):
    token = portal.issue_token("gpu-01").read_text().strip()
    answers: list[int] = []
    peak = [0]
    lock = threading.Lock()
    done = threading.Event()

    def report(number: int) -> None:
        event = {
            "id": f"burst-{number}",
            "kind": "xid",
            "observed_at": datetime.now(UTC).isoformat(),
            "xid": 13,
            "gpu_index": number % 8,
            "message": "Graphics SM Warp Exception",
        }
        request = urllib.request.Request(
            f"{portal.url}/api/v1/health/events/",
            json.dumps({"node": "gpu-01", "events": [event]}).encode(),
            {"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as reply:
                status = reply.status
        except urllib.error.HTTPError as error:
            status = error.code
        with lock:
            answers.append(status)

    def sender(first: int) -> None:
        for number in range(first, REPORTS, SENDERS):
            report(number)

    def count_connections() -> None:
        query = (
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()"
        )
        while not done.wait(0.05):
            peak[0] = max(peak[0], portal.database.scalar(query, portal.database.name))

    watcher = threading.Thread(target=count_connections)
    watcher.start()
    senders = [threading.Thread(target=sender, args=(first,)) for first in range(SENDERS)]
    for thread in senders:
        thread.start()
    for thread in senders:
        thread.join()
    done.set()
    watcher.join()

    assert answers.count(201) == REPORTS, sorted(set(answers))
    assert 1 <= peak[0] <= POOL_SIZE, f"{peak[0]} connections for a pool of {POOL_SIZE}"
    received = portal.database.scalar(
        "SELECT count(*) FROM health_receivedeventid r JOIN clusters_node n ON n.id = r.node_id "
        "WHERE n.name = %s AND r.event_id LIKE 'burst-%%'",
        "gpu-01",
    )
    assert received == REPORTS
