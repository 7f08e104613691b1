"""A real Medbay portal on the real local Slurm, for the researcher's browser journey.

    SLURM_CONF=... MEDBAY_BACKEND=slurm MEDBAY_FLEET=slurm-spares \\
    DATABASE_URL=sqlite:////tmp/x.sqlite3 python tests/e2e/slurm_portal_server.py PORT

What `manage.py serve` runs (daphne with the Slurm sync on a thread), plus one
remediation engine worker on another thread: with the in-memory channel layer
only this process reaches the browser's websocket, and the engine's step rows
must reach it. Users are those of portal_server.py (alice maps to the Unix
user alice). Commands on stdin, answered E2E-ACK {json}:
`{"op": "agent_token", "node": "gpu-02"}` issues the node agent's token;
`{"op": "job_story", "job": 23}` returns what the portal recorded of a job.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.e2e.portal_server import PASSWORD, USERS, follow_commands, serve  # noqa: E402

ENGINE_POLL_S = 0.2
# The checkpoint grace of the train partition: long enough for a USR1 checkpoint,
# short enough for a test.
GRACE_S = 10


def main(port: int) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    seed()
    threading.Thread(target=follow_commands, args=(COMMANDS,), daemon=True).start()
    serve(port)


def seed(users: dict[str, str] = USERS) -> None:
    from django.core.management import call_command

    from clusters.backends import registry
    from clusters.models import Partition
    from core.roles import Role
    from identity.accounts import create_user_with_role
    from remediation.engine import Engine
    from sync.cycle import sync_once
    from sync.loop import SyncLoop, ensure_cluster

    call_command("migrate", interactive=False, verbosity=0)
    backend = registry.get_backend()
    cluster = ensure_cluster(backend)
    sync_once(cluster, backend)
    Partition.objects.filter(cluster=cluster, name="train").update(checkpoint_grace_s=GRACE_S)
    for username, role in users.items():
        create_user_with_role(username, Role(role), PASSWORD)
    SyncLoop(cluster, backend, interval_s=1).start()
    worker = Engine("e2e-slurm-engine")
    threading.Thread(
        target=worker.run_forever, kwargs={"interval": ENGINE_POLL_S}, daemon=True
    ).start()


def agent_token(command) -> dict:
    from clusters.models import Node
    from health.models import NodeToken

    _, raw = NodeToken.issue(Node.objects.get(name=command["node"]))
    return {"token": raw}


def job_story(command) -> dict:
    """What the portal recorded of a job: its rows' states, progress reports and tokens
    (a failing journey prints it)."""
    from jobs.models import Job

    rows = []
    for job in Job.objects.filter(slurm_id=command["job"]).order_by("pk"):
        rows.append(
            {
                "row": job.pk,
                "state": job.state,
                "superseded": job.superseded,
                "changes": [
                    f"{c.at:%H:%M:%S.%f} {c.from_state}->{c.to_state} {c.reason} ({c.actor})"
                    for c in job.state_changes.order_by("at", "pk")
                ],
                "progress": [
                    f"{p.reported_at:%H:%M:%S.%f} step {p.step} saved={p.checkpoint_saved}"
                    f" restarts={p.restart_count}"
                    for p in job.progress_reports.order_by("reported_at", "pk")
                ],
                "tokens": [f"revoked {t.revoked_at}" for t in job.tokens.all()],
            }
        )
    return {"rows": rows}


COMMANDS = {"agent_token": agent_token, "job_story": job_story}


if __name__ == "__main__":
    main(int(sys.argv[1]))
