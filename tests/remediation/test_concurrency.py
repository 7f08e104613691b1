"""Several engine workers and racing triggers on PostgreSQL, with real row locks."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from clusters.models import Node
from remediation import actions, services
from remediation.engine import Engine
from remediation.models import Action, Remediation, StepOutcome, Trigger
from remediation.transitions import ACTIVE, RunStatus

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("postgres_only"),
]

FAST = {"grace_s": 0, "verify_after_s": 0}


def in_threads(count: int, target) -> list:
    """Run target(i) in `count` threads released together; returns results or exceptions."""
    barrier = threading.Barrier(count)
    results: list = [None] * count

    def body(index):
        try:
            barrier.wait()
            results[index] = target(index)
        except Exception as error:
            results[index] = error
        finally:
            connection.close()

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def request_replace(node_name: str):
    node = Node.objects.get(name=node_name)
    return services.create_run(
        node, Action.REPLACE, trigger=Trigger.ADMIN, reason="race", context=dict(FAST)
    )


def test_racing_requests_for_one_node_make_exactly_one_active_run(synced):
    results = in_threads(8, lambda i: request_replace("gpu-02"))
    runs = [r for r in results if isinstance(r, Remediation)]
    busy = [r for r in results if isinstance(r, services.NodeBusy)]
    assert (len(runs), len(busy)) == (1, 7), results
    assert all(error.existing.pk == runs[0].pk for error in busy)
    active = Remediation.objects.filter(status__in=[str(s) for s in ACTIVE])
    assert list(active.values_list("pk", flat=True)) == [runs[0].pk]


def test_two_workers_and_racing_triggers_replace_each_node_exactly_once(sim, synced, training_job):
    replaced = []
    real_replace = sim.replace

    def counting_replace(node, reason, **options):
        replaced.append(node)
        return real_replace(node, reason, **options)

    sim.replace = counting_replace
    stop = threading.Event()
    workers = [Engine(f"worker-{i}", backend=sim, fleet=sim) for i in range(2)]

    def work(index):
        if index < 2:
            workers[index].run_forever(interval=0.02, stop=stop)
            return None
        return request_replace("gpu-02" if index % 2 else "gpu-03")

    def stop_when_done():
        for _ in range(600):
            runs = Remediation.objects.all()
            if runs.count() == 2 and not runs.filter(status__in=[str(s) for s in ACTIVE]):
                break
            stop.wait(0.05)
        stop.set()
        connection.close()

    watcher = threading.Thread(target=stop_when_done)
    watcher.start()
    results = in_threads(8, work)
    watcher.join()
    created = [r for r in results if isinstance(r, Remediation)]
    assert len(created) == 2, results
    losers = [r for r in results[2:] if not isinstance(r, Remediation)]
    assert all(isinstance(loser, services.NodeBusy) for loser in losers), losers
    assert sorted(replaced) == ["gpu-02", "gpu-03"]
    assert sim.spare_capacity() == []
    for run in Remediation.objects.all():
        assert run.status == RunStatus.SUCCEEDED, run.message
        done = run.steps.filter(outcome__in=[StepOutcome.SUCCEEDED, StepOutcome.SKIPPED])
        indexes = list(done.values_list("index", flat=True))
        assert indexes == list(range(len(run.planned_steps)))  # each step once


def wait_until_someone_waits_for_a_row_lock(seconds: float = 10) -> None:
    waiting = (
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    with connection.cursor() as cursor:
        for _ in range(int(seconds / 0.02)):
            cursor.execute(waiting)
            if cursor.fetchone()[0]:
                return
            threading.Event().wait(0.02)
    raise AssertionError("the admin's cancel never waited for the engine's row lock")


def test_a_cancel_racing_the_engine_records_only_moves_that_happened(synced, admin_user):
    run = request_replace("gpu-02")
    read, moved = threading.Event(), threading.Event()

    def engine_parks_the_run(_):
        read.wait(10)
        with transaction.atomic():
            claimed = Remediation.objects.get(pk=run.pk)
            assert services.transition(claimed, RunStatus.WAITING, message="jobs draining")
            moved.set()
            # Commit only once the admin's UPDATE is blocked on this row, so that
            # it re-checks its WHERE against the run the engine has just parked.
            wait_until_someone_waits_for_a_row_lock()
        return claimed.status

    def admin_cancels(_):
        seen = Remediation.objects.get(pk=run.pk)  # the page the admin looked at
        assert seen.status == RunStatus.RUNNING
        read.set()
        moved.wait(10)
        return actions.cancel(seen, admin_user, "not needed after all")

    engine, admin = in_threads(2, lambda i: (engine_parks_the_run, admin_cancels)[i](i))
    assert engine == RunStatus.WAITING, engine
    assert isinstance(admin, Remediation) and admin.status == RunStatus.CANCELLED, admin
    changes = run.status_changes.order_by("at", "id").values_list("from_status", "to_status")
    assert list(changes) == [("", "running"), ("running", "waiting"), ("waiting", "cancelled")]
