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
fragment published on commit), and answers `E2E-ACK` (or `E2E-ERROR ...`);
`E2E_BEFORE_SERVING` holds commands to run before it listens. So
the suite needs no Redis and still exercises the real publish path. Commands
that create something answer `E2E-ACK {json}` with what the test needs to find it.

A remediation engine worker runs in a thread of this process for the same
reason: its step rows must reach the browser through this process's channel
layer, and it must act on this process's in-memory simulator.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "e2e-known-password-42"
USERS = {"alice": "researcher", "manager": "manager", "admin": "admin"}
NODE_PREFIX = "e2e"
ENGINE_POLL_S = 0.2


def main(port: int) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    cluster, sim = seed()
    # Changes made before the server listens: what a page whose server restarted
    # missed while it was away (E2E_BEFORE_SERVING, a JSON list of commands).
    for command in json.loads(os.environ.get("E2E_BEFORE_SERVING", "[]")):
        COMMANDS[command["op"]](cluster, sim, command)
    threading.Thread(target=follow_commands, args=(COMMANDS, cluster, sim), daemon=True).start()
    threading.Thread(target=run_engine, daemon=True).start()
    serve(port)


def run_engine() -> None:
    from remediation.engine import Engine

    Engine("e2e-engine").run_forever(interval=ENGINE_POLL_S)


def seed():
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.utils import timezone

    from clusters.backends import registry
    from clusters.backends.simulated import SimulatedCluster
    from clusters.models import Cluster, Partition
    from core.roles import Role
    from identity.accounts import create_user_with_role
    from sync.cycle import apply_snapshot

    call_command("migrate", interactive=False, verbosity=0)
    # Started now: job times and the wall-clock history rows read as one clock.
    sim = SimulatedCluster.standard(
        train=4, infer=1, spare=1, seed=3, prefix=NODE_PREFIX, start=timezone.now()
    )
    sim.fault_rate_per_gpu_day = 0
    registry.use(sim)
    cluster, _ = Cluster.objects.update_or_create(name="e2e", defaults={"backend": "simulated"})
    apply_snapshot(cluster, sim.partitions(), sim.nodes(), sim.jobs())
    # A 1 s checkpoint grace, so that a recovery takes seconds and not two minutes.
    Partition.objects.filter(cluster=cluster).update(checkpoint_grace_s=1)
    User = get_user_model()
    for username, role in USERS.items():
        # A restarted portal keeps its users as they were: setting the password
        # again would end their sessions, which a restart must not do.
        known = User.objects.filter(username=username).first()
        if known is None or not known.check_password(PASSWORD):
            create_user_with_role(username, Role(role), PASSWORD)
    return cluster, sim


def follow_commands(commands: dict, *context) -> None:
    """Answer each stdin command with `commands[op](*context, command)`."""
    from django.db import connection

    for line in sys.stdin:
        try:
            command = json.loads(line)
            handler = commands.get(command.get("op"))
            if handler is None:
                raise ValueError(f"unknown op {command.get('op')!r}")
            answer = handler(*context, command)
        except Exception as error:  # report to the test instead of dying silently
            print(f"E2E-ERROR {type(error).__name__}: {error}", flush=True)
        else:
            print("E2E-ACK" + (f" {json.dumps(answer)}" if answer else ""), flush=True)
        finally:
            connection.close()


def sync(cluster, sim, command=None) -> None:
    from sync.cycle import apply_snapshot

    apply_snapshot(cluster, sim.partitions(), sim.nodes(), sim.jobs(), actor="e2e")


def drain(cluster, sim, command) -> None:
    sim.drain_node(command["node"], command.get("reason", "e2e"))
    sync(cluster, sim)


def resume(cluster, sim, command) -> None:
    sim.resume_node(command["node"])
    sync(cluster, sim)


def step(cluster, sim, command) -> None:
    """Move simulated time on: pending jobs start, due jobs finish."""
    sim.advance(timedelta(seconds=command.get("seconds", 1)))
    sync(cluster, sim)


def run_job(cluster, sim, command) -> dict:
    """A running job of `user` holding whole nodes' GPUs, as if Slurm had just started it."""
    from clusters.backends.base import JobSubmission

    gpus = command.get("gpus", 8)
    script = (
        f"#!/bin/bash\n#SBATCH --job-name={command.get('name', 'e2e-train')}\n"
        f"#SBATCH --partition={command.get('partition', 'train')}\n"
        f"#SBATCH --nodes={command.get('nodes', 1)}\n#SBATCH --gres=gpu:{gpus}\nsrun train.py\n"
    )
    job_id = sim.submit_job(JobSubmission(script=script, user=command.get("user", "bob")))
    sim.advance(timedelta(0))
    sync(cluster, sim)
    return {"job": job_id, "state": sim.job(job_id).state, "nodes": list(sim.job(job_id).nodes)}


def xid(cluster, sim, command) -> dict:
    """A kernel-log XID line on a node, through the agent's parser and the real ingest."""
    from django.utils import timezone

    from clusters.backends.simulated import SimFault
    from demo.simulation import record_gpu_fault

    fault = SimFault(
        at=timezone.now(),
        node=command["node"],
        gpu=command.get("gpu", 3),
        xid=command.get("xid", 79),
        message=command.get("message", "GPU has fallen off the bus."),
    )
    result = record_gpu_fault(cluster, fault)
    return {"events": result.accepted if result is not None else 0}


def progress(cluster, sim, command) -> None:
    """The job reports a saved checkpoint (what `POST jobs/{id}/progress/` stores)."""
    from jobs.models import Job, JobProgress

    job = Job.objects.get(cluster=cluster, slurm_id=command["job"])
    JobProgress.objects.create(
        job=job, step=command["step"], checkpoint_saved=True, restart_count=job.restart_count
    )


def decide(cluster, sim, command) -> dict:
    """Another admin approves or rejects a waiting run, through the same action the page uses."""
    from django.contrib.auth import get_user_model

    from remediation import actions
    from remediation.models import Remediation

    run = Remediation.objects.get(pk=command["run"])
    admin = get_user_model().objects.get(username="admin")
    decide = actions.approve if command.get("verdict", "approve") == "approve" else actions.reject
    decide(run, admin, command.get("comment", "e2e: decided elsewhere"))
    return {"run": run.pk}


def drop_sockets(cluster, sim, command) -> None:
    """Close every open live socket as a restarting server does (pages reconnect)."""
    from django.contrib.auth import get_user_model

    from core import live
    from portal.consumers import CLOSE_RESTARTING

    for pk in get_user_model().objects.values_list("pk", flat=True):
        live.close_sockets(live.user_group(pk), CLOSE_RESTARTING)


def fresh_training(cluster, sim, command) -> dict:
    """Earlier tests' jobs cancelled, their drained or failed nodes back, one more spare:
    a test that needs whole training nodes and a spare gets them in any order."""
    for job in sim.jobs():
        if job.state in ("PENDING", "RUNNING", "SUSPENDED"):
            sim.cancel_job(job.job_id)
    for node in sim.nodes():
        if node.flags & {"drain", "fail"} and "spare" not in node.partitions:
            sim.resume_node(node.name)
    name = f"{NODE_PREFIX}-{len(sim.nodes()) + 1:02d}"
    sim.add_node(name, "spare", pool="spare")
    sim.advance(timedelta(seconds=1))
    sync(cluster, sim)
    return {"spare": name}


def await_approval(cluster, sim, command) -> dict:
    """A policy's run that stops for an admin's approval, as the policies create them."""
    from clusters.models import Node
    from remediation import services
    from remediation.models import Mode, Trigger

    node = Node.objects.get(cluster=cluster, name=command["node"])
    run = services.create_run(
        node,
        command["action"],
        trigger=Trigger.POLICY,
        reason=command.get("reason", "e2e: policy asks first"),
        mode=Mode.APPROVAL,
        actor="e2e",
    )
    return {"run": run.pk}


def history(cluster, sim, command) -> dict:
    from demo.past import FIELD_RATE, generate_history

    stats = generate_history(
        cluster,
        command.get("days", 3),
        jobs=command.get("jobs"),
        fault_rate_per_gpu_day=command.get("fault_rate", FIELD_RATE),
    )
    return {"jobs": stats.jobs, "node_changes": stats.node_changes}


def recorded_accounting(cluster, sim, command) -> dict:
    """Slurm's accounting of alice's and bob's jobs (the recorded 22.05 sacct --json of
    2026-12-01), imported by `import_accounting` as from a real cluster, replayed on
    `day`: other tests' generated history covers the last few days, and the report
    reads every cluster, so the recorded day is moved where no other record lies."""
    from dataclasses import replace
    from datetime import UTC, date, datetime, timedelta
    from pathlib import Path

    from clusters.backends.slurm_accounting import finished_in
    from clusters.backends.slurm_parsers import decode_accounting_json
    from jobs.accounting import import_accounting

    sample = Path(__file__).resolve().parent.parent / "fixtures/slurm/22.05/accounting"
    recorded = decode_accounting_json((sample / "sacct_D_X_alice_bob.json").read_text())
    shift = date.fromisoformat(command["day"]) - date(2026, 12, 1)

    def moved(moment):
        return moment + shift if moment is not None else None

    records = [
        replace(
            record,
            submit_time=moved(record.submit_time),
            start_time=moved(record.start_time),
            end_time=moved(record.end_time),
        )
        for record in recorded
    ]

    class Recorded:
        name = "slurm"

        def finished_jobs(self, start, end):
            return finished_in(records, start, end)

    since = datetime.combine(date.fromisoformat(command["day"]), datetime.min.time(), UTC)
    result = import_accounting(cluster, Recorded(), since=since, until=since + timedelta(days=1))
    return {"records": result.records}


def superuser(cluster, sim, command) -> dict:
    """A superuser, who sees every page of Django's admin site (the admin role sees none)."""
    from core.roles import Role
    from identity.accounts import create_user_with_role

    user, _ = create_user_with_role(command["username"], Role.ADMIN, PASSWORD)
    user.is_superuser = True
    user.save(update_fields=["is_superuser"])
    return {"pk": user.pk}


def cluster_row(cluster, sim, command) -> dict:
    """Another cluster's row, without nodes: enough for the pages that let one choose."""
    from clusters.models import Cluster

    row, _ = Cluster.objects.get_or_create(name=command["name"])
    return {"pk": row.pk}


def medbay_user(cluster, sim, command) -> dict:
    """`manage.py medbay_user ARGS` inside the portal, whose sockets a disable must close."""
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("medbay_user", *command["args"], stdout=out)
    return {"output": out.getvalue()}


def page_objects(cluster, sim, command) -> dict:
    """One of each object a page's URL names that the other commands do not make, for the
    tests that open every page: a job template of alice's, a policy and a fault group.
    None of them changes what the engine does: the policy is off and names no XID, and
    the fault group names a part nothing else uses and was already split."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from health.models import FaultGroup, FaultGroupKind
    from jobs.models import JobTemplate
    from remediation.models import Policy

    alice = get_user_model().objects.get(username="alice")
    template, _ = JobTemplate.objects.get_or_create(owner=alice, name="e2e-every-page")
    policy, _ = Policy.objects.get_or_create(
        check_name="e2e-every-page", defaults={"action": "cordon", "enabled": False}
    )
    now = timezone.now()
    group, _ = FaultGroup.objects.get_or_create(
        cluster=cluster,
        part="e2e every-page switch",
        defaults={
            "kind": FaultGroupKind.PART,
            "rule": "e2e",
            "window_s": 10,
            "opened_at": now,
            "split_at": now,
            "split_by": "e2e",
        },
    )
    return {
        "template": template.pk,
        "policy": policy.pk,
        "fault_group": group.pk,
        "cluster": cluster.name,
        "demand_policy": demand_policy(cluster),
    }


def demand_policy(cluster) -> int:
    """The cluster's reallocation policy (off, as every new one), for the pages naming one."""
    from django.contrib.auth import get_user_model

    from clusters.models import NodePool
    from demand.models import ReallocationPolicy
    from demand.policies import save_policy

    found = ReallocationPolicy.objects.filter(cluster=cluster).first()
    if found is not None:
        return found.pk
    policy = ReallocationPolicy(
        cluster=cluster,
        training_pool=NodePool.objects.get(cluster=cluster, kind="training"),
        inference_pool=NodePool.objects.get(cluster=cluster, kind="inference"),
        inference_min_nodes=0,
    )
    return save_policy(policy, user=get_user_model().objects.get(username="admin")).pk


def demand_proposal(cluster, sim, command) -> dict:
    """A reallocation policy's proposal waiting for approval, with its evidence: the policy
    turned on in approval mode (one move an hour), the inference load far over its target,
    and idle training nodes, sampled and decided as the sync does."""
    from django.utils import timezone

    from clusters.backends.simulated import InferenceCurve
    from demand.deciding import decide_cluster
    from demand.models import ReallocationPolicy
    from demand.sampling import sample
    from remediation.models import Remediation, Trigger

    policy = ReallocationPolicy.objects.get(pk=demand_policy(cluster))
    ReallocationPolicy.objects.filter(pk=policy.pk).update(
        enabled=True, mode="approval", hysteresis_s=0, max_moves_per_hour=1
    )
    sim.demand_mode(InferenceCurve(trough_nodes=5))
    sync(cluster, sim)
    now = timezone.now()
    sample(cluster, sim, sim, now=now)
    decide_cluster(cluster, now=now)
    # Off again: nothing else in the suite should be moved by it.
    ReallocationPolicy.objects.filter(pk=policy.pk).update(enabled=False)
    run = Remediation.objects.filter(trigger=Trigger.DEMAND).order_by("-pk").first()
    if run is None:
        verdict = ReallocationPolicy.objects.get(pk=policy.pk).checked_sentence
        raise RuntimeError(f"the policy proposed nothing: {verdict}")
    return {"run": run.pk, "sentence": run.context["demand"]["sentence"]}


def second_cluster(cluster, sim, command) -> dict:
    """A second simulated cluster configured in the table (as `manage.py cluster add`
    makes one), with its own simulator, nodes and a running job of alice's."""
    from clusters.backends import registry
    from clusters.backends.base import JobSubmission
    from clusters.config import ClusterConfig
    from clusters.configure import add_cluster
    from clusters.models import Cluster
    from sync.cycle import apply_snapshot

    name = command.get("name", "e2e-b")
    second = Cluster.objects.filter(name=name).first() or add_cluster(
        name, ClusterConfig(), by="e2e"
    )
    backend = registry.backend_for(second)
    backend.fault_rate_per_gpu_day = 0
    script = (
        "#!/bin/bash\n#SBATCH --job-name=on-second\n#SBATCH --partition=train\n"
        "#SBATCH --nodes=1\nsrun sleep 600\n"
    )
    job = backend.submit_job(JobSubmission(script=script, user="alice"))
    backend.advance(timedelta(seconds=30))
    apply_snapshot(second, backend.partitions(), backend.nodes(), backend.jobs())
    node = backend.nodes()[0].name
    return {"cluster": second.name, "job": job, "node": node}


COMMANDS = {
    "second_cluster": second_cluster,
    "sync": sync,
    "drain": drain,
    "resume": resume,
    "step": step,
    "run_job": run_job,
    "await_approval": await_approval,
    "xid": xid,
    "fresh_training": fresh_training,
    "decide": decide,
    "drop_sockets": drop_sockets,
    "progress": progress,
    "history": history,
    "recorded_accounting": recorded_accounting,
    "superuser": superuser,
    "medbay_user": medbay_user,
    "cluster_row": cluster_row,
    "page_objects": page_objects,
    "demand_proposal": demand_proposal,
}


def serve(port: int) -> None:
    from channels.routing import ProtocolTypeRouter
    from daphne.endpoints import build_endpoint_description_strings
    from daphne.server import Server

    from portal.asgi import application
    from portal.server import StaticFiles

    app = ProtocolTypeRouter(
        {
            "http": StaticFiles(application.application_mapping["http"]),
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
