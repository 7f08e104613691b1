"""Chaos: Redis stops under a running portal, then comes back.

A real portal (daphne) uses a private redis-server for its channel layer and
cache. While Redis is down, pages, log-ins and the API keep working (live
updates are dropped, not raised); once it is back, a browser that connects
afterwards receives live updates again.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime

import pytest
from websockets.sync.client import connect

from tests.chaos.conftest import ChaosPortal
from tests.health.live_portal import ServerDatabase

pytestmark = pytest.mark.integration

LIVE_TIMEOUT_S = 10


# Both of channels_redis's layers (settings.CHANNEL_LAYER): lists, the default, and
# pub/sub.
@pytest.fixture(params=["lists", "pubsub"])
def portal(request, private_redis, tmp_path):
    database = ServerDatabase.create(tmp_path)
    layer = {"REDIS_URL": private_redis.url, "CHANNEL_LAYER": request.param}
    server = ChaosPortal(database, tmp_path, extra_env=layer)
    try:
        server.users = server.seed(nodes=8)
        server.start()
        yield server
    finally:
        server.stop()
        database.drop()


def status_of(portal, path: str, cookie: str = "") -> int:
    request = urllib.request.Request(f"{portal.url}{path}", headers={"Cookie": cookie})
    try:
        with urllib.request.urlopen(request, timeout=15) as reply:
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code


def post_xid(portal, token: str, node: str, event_id: str, gpu: int) -> int:
    body = {
        "node": node,
        "events": [
            {
                "id": event_id,
                "kind": "xid",
                "xid": 79,
                "gpu_index": gpu,
                "message": "GPU has fallen off the bus.",
                "observed_at": datetime.now(UTC).isoformat(),
            }
        ],
    }
    request = urllib.request.Request(
        f"{portal.url}/api/v1/health/events/",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=15) as reply:
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code


def test_the_portal_keeps_working_without_redis_and_live_updates_resume_after_it_returns(
    portal, private_redis
):
    username, password = portal.users["researcher"]
    cookie = portal.log_in(username, password)
    token = portal.issue_token("gpu-02").read_text().strip()

    private_redis.stop()
    try:
        assert status_of(portal, "/", cookie) == 200
        assert status_of(portal, "/api/v1/nodes/", cookie) == 200
        assert post_xid(portal, token, "gpu-02", "redis-down-1", gpu=3) == 201
        assert portal.log_in(username, password)  # log-in throttling reads the cache
        assert status_of(portal, "/metrics") == 200
    finally:
        private_redis.start()

    nodes = portal.get_json("/api/v1/nodes/gpu-02/", cookie)
    assert {gpu["index"]: gpu["health"] for gpu in nodes["gpus"]}[3] == "failed"

    url = portal.url.replace("http://", "ws://") + "/ws/live/?topics=events,board"
    headers = {"Cookie": cookie, "Origin": portal.url}
    with connect(url, additional_headers=headers, open_timeout=10) as websocket:
        assert post_xid(portal, token, "gpu-02", "redis-back-1", gpu=5) == 201
        deadline = time.monotonic() + LIVE_TIMEOUT_S
        received = []
        while time.monotonic() < deadline:
            try:
                received.append(websocket.recv(timeout=deadline - time.monotonic()))
            except TimeoutError:
                break
            if any('id="node-gpu-02"' in html for html in received):
                break
    assert any('id="node-gpu-02"' in html for html in received), received
