"""The slurmrestd transport over a real HTTP connection to a local server.

The other unit tests fake requests' side; these go through sockets, so that how the
backend reads a body (a 5,000-job list is tens of megabytes), keeps its connection
and reads an error's words is what a real server sees.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from clusters.backends.base import BackendError
from clusters.backends.slurm_rest import JwtAuth, SlurmRestBackend

STAMP = {"set": True, "infinite": False, "number": 1800}


def job(job_id: int) -> dict:
    # Padded as a real record is (24.11 prints ~6 KB per job): the body is megabytes.
    return {
        "job_id": job_id,
        "job_state": ["RUNNING"],
        "user_name": "alice",
        "partition": "train",
        "nodes": f"gpu-{job_id % 64:02d}",
        "comment": "x" * 5000,
    }


class Slurmrestd(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    answers: dict[str, tuple[int, bytes]]
    connections: list

    def setup(self) -> None:
        super().setup()
        self.connections.append(self.client_address)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        status, body = self.answers[self.path.split("?")[0].rstrip("/")]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args) -> None:  # noqa: A002
        pass


@pytest.fixture
def server():
    handler = type("Handler", (Slurmrestd,), {"answers": {}, "connections": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd, handler
    httpd.shutdown()
    httpd.server_close()


def backend(tmp_path, httpd) -> SlurmRestBackend:
    token = tmp_path / "token"
    token.write_text("SLURM_JWT=abc.def.ghi\n")
    auth = JwtAuth(token_file=str(token), token_user="medbay")
    rest = SlurmRestBackend(f"http://127.0.0.1:{httpd.server_address[1]}", auth)
    rest.api_version = "v0.0.42"  # as if /openapi/v3 had been asked
    return rest


def test_a_job_list_of_megabytes_arrives_whole_and_polls_keep_one_connection(tmp_path, server):
    httpd, handler = server
    document = {"jobs": [job(n) for n in range(1, 2001)], "last_update": STAMP, "errors": []}
    body = json.dumps(document).encode()
    assert len(body) > 10_000_000
    handler.answers["/slurm/v0.0.42/jobs"] = (200, body)
    rest = backend(tmp_path, httpd)
    for _ in range(3):
        jobs = rest.jobs()
        assert [j.job_id for j in jobs] == list(range(1, 2001))
        assert jobs[-1].nodes == ("gpu-16",)
    assert len(handler.connections) == 1


def test_an_error_over_http_keeps_slurmrestds_words_and_the_connection_is_reused(tmp_path, server):
    httpd, handler = server
    refused = {"errors": [{"error": "Protocol authentication error", "error_number": 1007}]}
    handler.answers["/slurm/v0.0.42/nodes"] = (401, json.dumps(refused).encode())
    handler.answers["/slurm/v0.0.42/ping"] = (503, b"slurmctld is busy\n")
    rest = backend(tmp_path, httpd)
    with pytest.raises(BackendError) as raised:
        rest.nodes()
    assert raised.value.message == "slurmrestd 401: Protocol authentication error"
    assert raised.value.permanent
    with pytest.raises(BackendError) as raised:
        rest.get_json(rest.api("ping"))
    assert raised.value.message == "slurmrestd 503: slurmctld is busy"
    assert not raised.value.permanent
    assert len(handler.connections) == 1


def test_a_304_over_http_reuses_the_previous_nodes_and_the_connection(tmp_path, server):
    httpd, handler = server
    nodes = {"nodes": [{"name": "gpu-01", "state": ["IDLE"]}], "last_update": STAMP}
    handler.answers["/slurm/v0.0.42/nodes"] = (200, json.dumps(nodes).encode())
    rest = backend(tmp_path, httpd)
    first = rest.nodes()
    handler.answers["/slurm/v0.0.42/nodes"] = (304, b"")
    assert rest.nodes() == first
    assert rest.nodes() == first
    assert len(handler.connections) == 1
