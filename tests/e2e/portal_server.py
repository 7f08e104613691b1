"""A real Medbay portal for the browser tests: seeded, served by daphne, driven on stdin.

    DATABASE_URL=sqlite:////tmp/x.sqlite3 python tests/e2e/portal_server.py PORT

Migrates the database, seeds a small simulated cluster and the USERS below,
then serves HTTP and websockets with daphne in this process and prints
`E2E-READY` once it listens.

Why stdin and not Redis: with the in-memory channel layer only this process
can reach the browser's websocket, so the tests ask *this* process to change
the cluster. Each stdin line is a JSON command, e.g. `{"op": "drain", "node":
"e2e-02"}`; it changes the simulator and reconciles it with `apply_snapshot`,
the same path `slurm_sync` takes in production (history row, then the live
fragment published on commit), and answers `E2E-ACK` (or `E2E-ERROR ...`). So
the suite needs no Redis and still exercises the real publish path.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "e2e-known-password-42"
USERS = {"alice": "researcher", "manager": "manager", "admin": "admin"}
NODE_PREFIX = "e2e"


def main(port: int) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    cluster, sim = seed()
    threading.Thread(target=follow_commands, args=(cluster, sim), daemon=True).start()
    serve(port)


def seed():
    from django.core.management import call_command

    from clusters.backends import registry
    from clusters.backends.simulated import SimulatedCluster
    from clusters.models import Cluster
    from clusters.sync import apply_snapshot
    from portal.accounts import create_user_with_role
    from portal.roles import Role

    call_command("migrate", interactive=False, verbosity=0)
    sim = SimulatedCluster.standard(train=4, infer=1, spare=1, seed=3, prefix=NODE_PREFIX)
    sim.fault_rate_per_gpu_day = 0
    registry.use(sim)
    cluster, _ = Cluster.objects.update_or_create(name="e2e", defaults={"backend": "simulated"})
    apply_snapshot(cluster, sim.partitions(), sim.nodes(), sim.jobs())
    for username, role in USERS.items():
        create_user_with_role(username, Role(role), PASSWORD)
    return cluster, sim


def follow_commands(cluster, sim) -> None:
    from django.db import connection

    from clusters.sync import apply_snapshot

    for line in sys.stdin:
        try:
            command = json.loads(line)
            if command["op"] == "drain":
                sim.drain_node(command["node"], command.get("reason", "e2e"))
            elif command["op"] == "resume":
                sim.resume_node(command["node"])
            else:
                raise ValueError(f"unknown op {command['op']!r}")
            apply_snapshot(cluster, sim.partitions(), sim.nodes(), sim.jobs(), actor="e2e")
        except Exception as error:  # report to the test instead of dying silently
            print(f"E2E-ERROR {type(error).__name__}: {error}", flush=True)
        else:
            print("E2E-ACK", flush=True)
        finally:
            connection.close()


def serve(port: int) -> None:
    from channels.routing import ProtocolTypeRouter
    from daphne.endpoints import build_endpoint_description_strings
    from daphne.server import Server
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    from portal.asgi import application

    app = ProtocolTypeRouter(
        {
            "http": ASGIStaticFilesHandler(application.application_mapping["http"]),
            "websocket": application.application_mapping["websocket"],
        }
    )
    threading.Thread(target=announce_when_listening, args=(port,), daemon=True).start()
    Server(
        application=app,
        endpoints=build_endpoint_description_strings(host="127.0.0.1", port=port),
        signal_handlers=True,
        verbosity=0,
    ).run()


def announce_when_listening(port: int) -> None:
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        except OSError:
            threading.Event().wait(0.1)
            continue
        print("E2E-READY", flush=True)
        return


if __name__ == "__main__":
    main(int(sys.argv[1]))
