"""Serves the ASGI application with daphne inside the current process.

`demo` and `serve` run their background loops (simulator, Slurm sync,
remediation engine) in the same process as the websockets, so the in-memory
channel layer reaches every open page without Redis.
"""

from __future__ import annotations

from django.core.management.base import CommandError


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

    from clusters.remediation.engine import Engine

    worker = Engine(worker_id=worker_id)
    threading.Thread(target=worker.run_forever, name="engine", daemon=True).start()


def serve(host: str, port: int) -> None:
    from channels.routing import ProtocolTypeRouter
    from daphne.endpoints import build_endpoint_description_strings
    from daphne.server import Server
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    from portal.asgi import application

    # The portal serves its own static files; production puts a proxy in front.
    app = ProtocolTypeRouter(
        {
            "http": ASGIStaticFilesHandler(application.application_mapping["http"]),
            "websocket": application.application_mapping["websocket"],
        }
    )
    Server(
        application=app,
        endpoints=build_endpoint_description_strings(host=host, port=port),
        signal_handlers=True,
        verbosity=1,
    ).run()
