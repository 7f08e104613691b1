import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent.sender import Sender
from agent.spool import Spool


class FakePortal:
    """A tiny portal on 127.0.0.1 that can be stopped and restarted on the same port."""

    def __init__(self):
        self.received = []  # every event id, in arrival order, duplicates included
        self.accepted = {}  # id -> event, like the idempotent server
        self.requests = []
        self.status = 200
        self.port = 0
        self.server = None

    def start(self):
        portal = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                portal.requests.append((self.path, self.headers["Authorization"], body))
                if portal.status != 200:
                    self.send_response(portal.status)
                    self.end_headers()
                    self.wfile.write(b'{"detail": "no"}')
                    return
                duplicates = 0
                for event in body["events"]:
                    portal.received.append(event["id"])
                    duplicates += event["id"] in portal.accepted
                    portal.accepted[event["id"]] = event
                reply = {"accepted": len(body["events"]) - duplicates, "duplicates": duplicates}
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def portal():
    fake = FakePortal()
    fake.start()
    yield fake
    fake.stop()


def events(*ids):
    return [{"id": event_id, "kind": "check", "message": event_id} for event_id in ids]


def sender_for(spool, portal, **kwargs):
    return Sender(spool, portal.url, "s3cret", "gpu-07", timeout_s=2, **kwargs)


def test_it_posts_batches_with_the_node_and_bearer_token(tmp_path, portal):
    spool = Spool(tmp_path)
    spool.append(events("a", "b", "c"))
    assert sender_for(spool, portal, batch_size=2).flush() == 3
    assert [(path, auth, len(body["events"])) for path, auth, body in portal.requests] == [
        ("/api/v1/health/events/", "Bearer s3cret", 2),
        ("/api/v1/health/events/", "Bearer s3cret", 1),
    ]
    assert portal.requests[0][2]["node"] == "gpu-07"
    assert spool.pending() == []


def test_events_spooled_while_the_portal_is_down_arrive_in_order_exactly_once(tmp_path, portal):
    spool = Spool(tmp_path)
    sender = sender_for(spool, portal, batch_size=2)
    spool.append(events("a"))
    sender.flush()
    portal.stop()

    spool.append(events("b", "c", "d"))
    assert sender.flush(now=0) == 0
    assert sender.backoff.delay_s == 1.0
    assert sender.flush(now=0) == 0  # still backing off: no new attempt
    spool.append(events("e"))

    portal.start()
    # A restarted agent (new Spool and Sender) resumes from the acknowledgement pointer.
    restarted = sender_for(Spool(tmp_path), portal, batch_size=2)
    assert restarted.flush() == 4
    assert portal.received == ["a", "b", "c", "d", "e"]


def test_a_permanent_4xx_moves_the_batch_to_rejected_and_goes_on(tmp_path, portal):
    spool = Spool(tmp_path)
    spool.append(events("bad"))
    portal.status = 400
    sender_for(spool, portal).flush()
    portal.status = 200
    spool.append(events("good"))
    sender_for(spool, portal).flush()
    assert portal.received == ["good"]
    (rejected,) = (tmp_path / "rejected").iterdir()
    assert '"bad"' in rejected.read_text()


@pytest.mark.parametrize("status", [408, 429, 500, 503])
def test_retryable_statuses_keep_the_events(tmp_path, portal, status):
    spool = Spool(tmp_path)
    spool.append(events("a"))
    portal.status = status
    sender = sender_for(spool, portal)
    assert sender.flush() == 0
    assert [event["id"] for event in spool.pending()] == ["a"]
    assert list((tmp_path / "rejected").iterdir()) == []
    assert sender.backoff.delay_s > 0
