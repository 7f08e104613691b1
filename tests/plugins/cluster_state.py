"""The shared minicluster's known state, brought about before a test and checked after.

Every real-Slurm test of a session shares one cluster, whichever suite or fixture
started it and in whatever order, so no test may rely on the one before it having
tidied up, nor on a cluster that has only just answered `scontrol ping`: after a
slurmctld start 22.05's nodes read `unknown` until their slurmd's register again
(4.9-5.2 s measured here, with or without the accounting tests' cluster running),
and a spare that is not yet `idle` is no free spare to the engine.

The known state: every node registered, `idle`, with no drain, fail or other
flag; no job pending, running or completing; partitions as slurm.conf has them; no
maintenance hold of Medbay's left.
The minicluster belongs to the tests, so whatever a test left behind is undone
(jobs cancelled, nodes resumed, partitions reset) and then waited for, with a
bounded timeout; if it cannot be, the failure names the node, job or partition.
"""

from __future__ import annotations

import contextlib
import time

import pytest

from clusters.backends.base import BackendError

# Long enough for a job ignoring SIGTERM (KillWait=10) and a controller restart.
SETTLE_TIMEOUT_S = 90
ACTIVE_JOB_STATES = frozenset(
    {"PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "COMPLETING", "REQUEUED", "RESIZING"}
)
DRAINED_FLAGS = frozenset({"drain", "fail"})


def unregistered_nodes(backend) -> list[str]:
    """Nodes slurmctld has not heard from since it started (`unknown`, or `*`)."""
    return sorted(
        node.name
        for node in backend.nodes()
        if node.state == "unknown" or "not_responding" in node.flags
    )


def departures(backend) -> list[str]:
    """What differs from the known state, one phrase per node, job or partition."""
    if not backend.controller_up():
        return ["slurmctld does not answer scontrol ping"]
    found = []
    for node in backend.nodes():
        if node.state != "idle" or node.flags:
            flags = f" ({', '.join(sorted(node.flags))})" if node.flags else ""
            reason = f", reason {node.reason!r}" if node.reason else ""
            found.append(f"node {node.name} is {node.state}{flags}{reason}")
    for job in backend.jobs():
        if job.state in ACTIVE_JOB_STATES:
            where = f" on {','.join(job.nodes)}" if job.nodes else ""
            found.append(f"job {job.job_id} ({job.name}, {job.user}) is {job.state}{where}")
    for partition, wanted in partitions_changed(backend):
        found.append(
            f"partition {partition.name} holds {','.join(partition.nodes) or 'nothing'},"
            f" slurm.conf says {','.join(wanted) or 'nothing'}"
        )
    found += [f"Medbay's maintenance hold on {node} is left" for node in backend.checks_holds()]
    return found


def partitions_changed(backend) -> list[tuple]:
    """Each partition whose nodes differ from slurm.conf's, with slurm.conf's nodes."""
    configured = backend.configured_partitions()
    return [
        (partition, configured[partition.name])
        for partition in backend.partitions()
        if partition.name in configured
        and tuple(partition.nodes) != tuple(configured[partition.name])
    ]


def undo_leftovers(backend) -> None:
    """Cancel active jobs, resume drained, failed or down nodes, reset partitions."""
    if not backend.controller_up():
        return
    for job in backend.jobs():
        if job.state in ACTIVE_JOB_STATES - {"COMPLETING"}:
            backend.cancel_job(job.job_id)
    for node in backend.nodes():
        if node.flags & DRAINED_FLAGS or node.state == "down":
            # Not yet resumable (still completing, say): the next pass tries again.
            with contextlib.suppress(BackendError):
                backend.resume_node(node.name)
    for partition, wanted in partitions_changed(backend):
        backend.set_partition_nodes(partition.name, list(wanted))
    for node in backend.checks_holds():
        backend.release_checks_hold(node)


def bring_to_known_state(backend, when: str, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
    """Undo what was left and wait until nothing departs from the known state; fails
    after TIMEOUT_S naming what is still left (WHEN says before or after which test)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            found = departures(backend)
            if not found:
                return
            undo_leftovers(backend)
        except BackendError as error:  # slurmctld (re)starting: read again next pass
            found = [f"Slurm could not be read: {error.message}"]
        if time.monotonic() > deadline:
            pytest.fail(
                f"the shared Slurm cluster is not back to its known state {when} after"
                f" {timeout_s:g}s: " + "; ".join(found),
                pytrace=False,
            )
        time.sleep(0.5)


def wait_until_registered(backend, timeout_s: float = 60) -> None:
    """After a slurmctld start: wait until every slurmd has registered again."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            waiting = unregistered_nodes(backend)
        except BackendError as error:
            waiting = [f"(nodes unreadable: {error.message})"]
        if not waiting:
            return
        if time.monotonic() > deadline:
            pytest.fail(
                f"nodes not registered with slurmctld {timeout_s:g}s after its start:"
                f" {', '.join(waiting)}",
                pytrace=False,
            )
        time.sleep(0.2)
