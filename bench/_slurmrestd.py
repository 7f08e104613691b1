"""A stand-in slurmrestd for bench/sync.py: real HTTP on 127.0.0.1, slurmrestd's wire format.

It runs in a process of its own, as slurmrestd does, and serves what the benchmark's
synthetic Slurm holds: `/openapi/v3` (the endpoints a recorded slurmrestd of that
version offered), `/slurm/vX/ping/`, `/slurm/vX/nodes/` and `/slurm/vX/jobs/`, whose
bodies are the same documents `scontrol show node/job --json` prints. The benchmark
hands it each cycle's records (already serialised, as slurmctld's packing is not what
is measured) through a pipe, with the cycle's clock.

What slurmctld and slurmrestd do with `update_time`, as measured on 24.11 and 26.05
(deploy/minicluster/README.md): an answer's `last_update` is the time of the answer;
nothing changed since `update_time`: jobs are 200 with an empty list, `last_update` 0
and the warning "No job changes since update_time[N]", nodes an empty 304; on 24.11
a node poll with `update_time` after nodes changed but partitions did not is 500
"Unspecified error". Any change: the whole list. The token is not verified, but
a request without slurmrestd's two auth/jwt headers is refused with 401, as
slurmrestd refuses it.
"""

from __future__ import annotations

import json
import multiprocessing
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

DATA_PARSERS = {"24.11": "v0.0.42", "26.05": "v0.0.45"}


def stamp(number: int) -> dict:
    return {"set": True, "infinite": False, "number": number}


class State:
    """What the server answers from; swapped whole under a lock on each publish."""

    def __init__(self, version: str, rest_folder: Path) -> None:
        self.version = version
        self.data_parser = DATA_PARSERS[version]
        self.lock = threading.Lock()
        self.meta = json.loads((rest_folder / f"slurm_{self.data_parser}_ping.json").read_text())[
            "meta"
        ]
        paths = (rest_folder / "openapi_paths.txt").read_text().split()
        self.openapi = json.dumps(
            {"openapi": "3.0.2", "paths": {path: {"get": {}} for path in paths}}
        ).encode()
        ping = json.loads((rest_folder / f"slurm_{self.data_parser}_ping.json").read_text())
        self.ping = json.dumps(ping).encode()
        self.now = 0
        self.changed_at = {"nodes": 0, "jobs": 0, "partitions": 0}
        self.bodies = {"nodes": b"", "jobs": b""}
        self.requests = 0
        self.bytes_sent = 0

    def publish(self, now: int, changed_at: dict, records: dict) -> None:
        tail = json.dumps(
            {"last_update": stamp(now), "meta": self.meta, "errors": [], "warnings": []}
        ).encode()
        bodies = {
            what: b'{"' + what.encode() + b'": ' + text + b", " + tail[1:]
            for what, text in records.items()
        }
        with self.lock:
            self.now, self.changed_at = now, dict(changed_at)
            self.bodies.update(bodies)

    def answer(self, what: str, update_time: int | None) -> tuple[int, bytes]:
        with self.lock:
            changed_at, body = self.changed_at, self.bodies[what]
        if update_time is None or changed_at[what] > update_time:
            if (
                what == "nodes"
                and update_time is not None
                and self.version == "24.11"
                and changed_at["partitions"] <= update_time
            ):
                # slurmrestd asks for partitions with the same update_time and fails.
                return 500, self.error("Unspecified error")
            return 200, body
        if what == "nodes":
            return 304, b""
        warning = {
            "description": f"No {what[:-1]} changes since update_time[{update_time}]",
            "source": f"slurm_load_{what}()",
        }
        document = {
            what: [],
            "last_update": stamp(0),
            "meta": self.meta,
            "errors": [],
            "warnings": [warning],
        }
        return 200, json.dumps(document).encode()

    def error(self, text: str) -> bytes:
        error = {"description": "", "source": "", "error": text, "error_number": 1}
        return json.dumps({"meta": self.meta, "errors": [error], "warnings": []}).encode()


class Handler(BaseHTTPRequestHandler):
    # Keep-alive, as slurmrestd and requests.Session both do.
    protocol_version = "HTTP/1.1"
    # Headers and body are two writes: with Nagle's algorithm the second waits for the
    # client's delayed ACK of the first, 40 ms on every answer (slurmrestd has no
    # such stall).
    disable_nagle_algorithm = True
    state: State

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        url = urlsplit(self.path)
        path = url.path.rstrip("/")
        if not (self.headers.get("X-SLURM-USER-NAME") and self.headers.get("X-SLURM-USER-TOKEN")):
            return self.send(401, self.state.error("Protocol authentication error"))
        prefix = f"/slurm/{self.state.data_parser}/"
        if path == "/openapi/v3":
            return self.send(200, self.state.openapi)
        if path == prefix + "ping":
            return self.send(200, self.state.ping)
        what = path.removeprefix(prefix)
        if path.startswith(prefix) and what in ("nodes", "jobs"):
            since = parse_qs(url.query).get("update_time")
            return self.send(*self.state.answer(what, int(since[0]) if since else None))
        return self.send(404, self.state.error("Unable to find requested URL"))

    def send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.state.requests += 1
        self.state.bytes_sent += len(body)

    def log_message(self, format: str, *args) -> None:  # noqa: A002
        pass


def serve(version: str, rest_folder: str, control) -> None:
    """The server process: answers HTTP on a free port, and publishes from the pipe."""
    state = State(version, Path(rest_folder))
    handler = type("BoundHandler", (Handler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    control.send(server.server_address[1])
    while True:
        message = control.recv()
        if message is None:
            break
        if message == "counters":
            control.send((state.requests, state.bytes_sent))
            continue
        state.publish(*message)
        control.send("published")
    server.shutdown()


class RestServer:
    """The benchmark's handle on the stand-in slurmrestd process."""

    def __init__(self, version: str, rest_folder: Path) -> None:
        context = multiprocessing.get_context("fork")
        self.control, child = context.Pipe()
        self.process = context.Process(
            target=serve, args=(version, str(rest_folder), child), daemon=True
        )
        self.process.start()
        self.url = f"http://127.0.0.1:{self.control.recv()}"

    def publish(self, now: int, changed_at: dict, records: dict) -> None:
        """Serve these records (bytes of each JSON list) from now on; waits until it does."""
        self.control.send((now, changed_at, records))
        assert self.control.recv() == "published"

    def counters(self) -> tuple[int, int]:
        """(requests answered, bytes of bodies sent) so far."""
        self.control.send("counters")
        return self.control.recv()

    def close(self) -> None:
        self.control.send(None)
        self.process.join(timeout=10)
