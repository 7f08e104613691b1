"""Serves the ASGI application with daphne inside the current process.

`demo` and `serve` run their background loops (simulator, Slurm sync,
remediation engine) in the same process as the websockets, so the in-memory
channel layer reaches every open page without Redis.
"""

from __future__ import annotations

import re

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.exceptions import SuspiciousFileOperation
from django.core.management.base import CommandError
from django.http import Http404, HttpResponseNotFound
from django.template.loader import render_to_string


def parse_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        raise CommandError(f"--addr must look like 127.0.0.1:8000, got {addr!r}")
    return host, int(port)


def start_engine(worker_id: str) -> None:
    """One remediation engine worker on a thread of this process.

    Workers claim runs through the database, so this one may run beside any
    number of `run_engine` processes.
    """
    import threading

    from remediation.engine import Engine

    worker = Engine(worker_id=worker_id)
    threading.Thread(target=worker.run_forever, name="engine", daemon=True).start()


class StaticFiles(ASGIStaticFilesHandler):
    """The portal's own static files: 404 for anything missing or outside the root.

    Django's handler answered a missing file through the site's 404 view, which
    needs what the middleware (skipped for static files) sets on the request: a
    500. A path outside the static root (`/static/../manage.py`) raised
    SuspiciousFileOperation from the finders: a 500 and a traceback in the log.
    Each file says how long a browser may keep it (`cache_control`).
    """

    def serve(self, request):
        try:
            response = super().serve(request)
        except (Http404, SuspiciousFileOperation):
            # The bare page: no session, user or database behind a static path.
            page = render_to_string("error_bare.html", {"status": 404, "message": "Not found."})
            return HttpResponseNotFound(page)
        response["Cache-Control"] = cache_control(self.file_path(request.path))
        return response


# A vendored file's name carries its version (vendor/htmx-2.0.11.min.js,
# vendor/plotly-basic-4.1.1.min.js): what is served under that name never changes, so a
# browser keeps it a year without asking, and plotly's megabyte is fetched once. The
# portal's own files change with a release under the same name: a browser asks each
# time, and Django's static view answers a 304 while the file is unchanged.
VERSIONED = re.compile(r"^vendor/[^/]+-\d+(\.\d+)+[^/]*$")


def cache_control(relative_path: str) -> str:
    if VERSIONED.match(relative_path.replace("\\", "/")):
        return "public, max-age=31536000, immutable"
    return "no-cache"


def serve(host: str, port: int) -> None:
    from channels.routing import ProtocolTypeRouter
    from daphne.endpoints import build_endpoint_description_strings
    from daphne.server import Server

    from portal.asgi import application

    # The portal serves its own static files; production puts a proxy in front.
    app = ProtocolTypeRouter(
        {
            "http": StaticFiles(application.application_mapping["http"]),
            "websocket": application.application_mapping["websocket"],
        }
    )
    Server(
        application=app,
        endpoints=build_endpoint_description_strings(host=host, port=port),
        signal_handlers=True,
        verbosity=1,
    ).run()
