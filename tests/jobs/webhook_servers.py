"""Real HTTP servers on 127.0.0.1 for the webhook tests: they record every request."""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Seen:
    """One request a test server received."""

    method: str
    path: str
    host: str
    body: dict | None


@dataclass
class Server:
    """A running server: its base URL and what it received."""

    url: str
    port: int
    seen: list[Seen] = field(default_factory=list)


@contextmanager
def webhook_server(status: int = 200, location: str = ""):
    """Answer every request with STATUS (and LOCATION, for a redirect)."""
    server_state: dict = {}

    class Handler(BaseHTTPRequestHandler):
        def _answer(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            state = server_state["server"]
            state.seen.append(Seen(self.command, self.path, self.headers["Host"], body))
            self.send_response(status)
            if location:
                self.send_header("Location", location.format(port=state.port))
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = _answer

        def log_message(self, *args):
            """Keep the test output quiet."""

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port = httpd.server_port
    server = Server(f"http://127.0.0.1:{port}", port)
    server_state["server"] = server
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()
