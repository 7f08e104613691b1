"""A stand-in for Prometheus's HTTP query API, answering as Prometheus 2.x does.

Only for the unit tests of how answers are read; tests/demand/test_prometheus_real.py
asks Debian's real `prometheus` server.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


class FakePrometheus:
    """Answers /api/v1/query with `answer(query) -> (status, body)`; records queries."""

    def __init__(self) -> None:
        self.queries: list[str] = []
        self.answer = lambda query: (200, vector(1.0))
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query = parse_qs(url.query).get("query", [""])[-1]
                server.queries.append(query)
                status, body = server.answer(query)
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                return

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def vector(*values: float) -> dict:
    result = [
        {"metric": {"instance": f"serve-{i}"}, "value": [1700000000.0, str(v)]}
        for i, v in enumerate(values)
    ]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def bad_data(message: str) -> dict:
    return {"status": "error", "errorType": "bad_data", "error": message}
