"""The remediation engine: claims due runs and advances each by one step.

Several workers may run at once. A worker claims a run with a short lease
(`select_for_update(skip_locked=True)` on PostgreSQL, a conditional UPDATE on
SQLite), writes the step's intent as a committed STARTED row, calls Slurm or the
fleet outside any transaction, then records the result and releases the lease.
A worker killed at any point leaves the lease to expire; the next worker re-runs
the step, and because steps check the cluster before acting, nothing is done
twice.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from datetime import timedelta

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from clusters.backends import registry
from clusters.backends.base import BackendError, ClusterBackend, FleetProvider
from clusters.models import Cluster
from core import live
from health.validation import validate_node
from remediation import services
from remediation.models import Remediation, RemediationStep, StepOutcome
from remediation.steps import (
    StepContext,
    StepResult,
    Validator,
    get_step,
    holds,
    on_commit_all,
)
from remediation.steps import hardware as hardware_steps
from remediation.steps import jobs as job_steps
from remediation.steps import nodes as node_steps
from remediation.transitions import ALLOWED, RunStatus

logger = logging.getLogger(__name__)

# Importing the step modules registers their steps: the engine, which runs them,
# names the modules here rather than the registry importing its own submodules.
STEP_MODULES = (job_steps, node_steps, hardware_steps)

DEFAULT_LEASE = timedelta(seconds=30)
MAX_TRANSIENT_FAILURES = 6
MAX_BACKOFF_S = 60.0
# A run whose advance crashes this many times (outside its step) needs an admin.
MAX_CRASHES = 3
# A single run_once pass never spins forever on a step that keeps asking to be
# retried at once; the next pass picks it up again.
MAX_STEPS_PER_PASS = 500
# A worker that finished a step goes on with the same run while its next step is due
# at once, up to this many steps, instead of putting it at the back of the queue: in a
# storm of 500 runs every step would otherwise wait for a step of each other run.
MAX_STEPS_PER_CLAIM = 25
# How often a worker looks for maintenance holds left behind by a killed engine.
HOLD_SWEEP_S = 30.0
DONE = frozenset({StepOutcome.SUCCEEDED, StepOutcome.SKIPPED, StepOutcome.DRY_RUN})


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident() % 10000}"


class Engine:
    """One worker. `run_once` advances every due run until none is due."""

    def __init__(
        self,
        worker_id: str | None = None,
        *,
        backend: ClusterBackend | None = None,
        fleet: FleetProvider | None = None,
        validator: Validator | None = None,
        lease: timedelta = DEFAULT_LEASE,
    ) -> None:
        self.worker = (worker_id or default_worker_id())[:64]
        self._backend, self._fleet = backend, fleet
        self.validator = validator or validate_node
        self.lease = lease

    @property
    def backend(self) -> ClusterBackend:
        """The environment's cluster's backend (or the one this engine was given)."""
        return self._backend or registry.get_backend()

    @property
    def fleet(self) -> FleetProvider:
        return self._fleet or registry.get_fleet()

    def backend_for(self, cluster: Cluster) -> ClusterBackend:
        """The backend a run on CLUSTER acts through: the one this engine was given
        (tests, benchmarks), else the cluster's own (the environment's, or its row's)."""
        return self._backend or registry.backend_for(cluster)

    def fleet_for(self, cluster: Cluster) -> FleetProvider:
        return self._fleet or registry.fleet_for(cluster)

    # ------------------------------------------------------------- the loop
    def run_once(self) -> int:
        """Advance due runs one step at a time until none is due; returns the steps taken."""
        taken, run, chained = 0, None, 0
        while taken < MAX_STEPS_PER_PASS:
            again = run is not None and chained < MAX_STEPS_PER_CLAIM
            run = self._claim_again(run) if again else None
            if run is not None:
                chained += 1
            else:
                run, chained = self.claim(), 1
            if run is None:
                break
            try:
                self.advance(run)
            except Exception as error:  # one run's bad record must not stop every other run
                self._crashed(run, error)
                run = None
            taken += 1
        return taken

    def run_forever(self, *, interval: float = 0.5, stop: threading.Event | None = None) -> None:
        from remediation.admission import decide_due

        stop = stop or threading.Event()
        swept_at = None
        while not stop.is_set():
            try:
                # Incidents reported just as another process's decision pass ended.
                decide_due()
                now = time.monotonic()
                if swept_at is None or now - swept_at >= HOLD_SWEEP_S:
                    swept_at = now
                    self.release_stranded_holds()
                taken = self.run_once()
            except Exception:  # a database blip must not end the worker
                logger.exception("Engine pass failed; retrying")
                taken = 0
            if not taken:
                stop.wait(interval)

    def release_stranded_holds(self) -> list[str]:
        """Maintenance holds no active run names (an engine killed mid-check) go, in
        each enabled cluster through its own backend; one cluster's unreachable
        Slurm only postpones its own sweep."""
        clusters = Cluster.objects.filter(enabled=True).order_by("name")
        if self._backend is not None:  # given one backend: the environment's clusters only
            clusters = clusters.filter(from_environment=True)
        released = []
        for cluster in clusters:
            released += self._release_stranded(cluster)
        return released

    def _release_stranded(self, cluster: Cluster) -> list[str]:
        try:
            released = holds.release_stranded(self.backend_for(cluster), cluster)
        except (BackendError, ValueError) as error:  # the next sweep tries again
            logger.warning(
                "Could not look for stranded maintenance holds on %s: %s", cluster.name, error
            )
            return []
        if released:
            logger.warning(
                "Released stranded maintenance holds on %s: %s", cluster.name, ", ".join(released)
            )
        return released

    # ------------------------------------------------------------- claiming
    def due(self):
        now = timezone.now()
        return (
            Remediation.objects.filter(
                status__in=[RunStatus.RUNNING, RunStatus.WAITING], due_at__lte=now
            )
            .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
            .order_by("due_at", "id")
        )

    def claim(self) -> Remediation | None:
        """Lease one due run to this worker, or None when nothing is due."""
        if connection.vendor == "postgresql":
            pk = self._claim_locked()
        else:
            pk = self._claim_conditional()
        if pk is None:
            return None
        return Remediation.objects.select_related("node__cluster").get(pk=pk)

    def _claim_again(self, run: Remediation) -> Remediation | None:
        """The run this worker just advanced, leased again if its next step is due now.

        The same conditional UPDATE as on SQLite: on PostgreSQL a worker that has just
        locked the row to claim it commits its lease first, and this then matches nothing.
        """
        if not self.due().filter(pk=run.pk).update(**self._lease_values()):
            return None
        return Remediation.objects.select_related("node__cluster").get(pk=run.pk)

    def _lease_values(self) -> dict:
        return {"claimed_by": self.worker, "claimed_until": timezone.now() + self.lease}

    def _claim_locked(self) -> int | None:
        with transaction.atomic():
            pk = self.due().select_for_update(skip_locked=True).values_list("pk", flat=True)[:1]
            pk = next(iter(pk), None)
            if pk is not None:
                Remediation.objects.filter(pk=pk).update(**self._lease_values())
            return pk

    def _claim_conditional(self) -> int | None:
        # SQLite has no row locks: the UPDATE re-checks the due conditions, and of
        # two workers racing for one run only one sees a row count of 1.
        for pk in list(self.due().values_list("pk", flat=True)[:10]):
            if self.due().filter(pk=pk).update(**self._lease_values()):
                return pk
        return None

    # ------------------------------------------------------------- advancing
    def advance(self, run: Remediation) -> None:
        """Run the current step of a claimed run once and record what it did."""
        if run.current_step >= len(run.planned_steps):
            self._finish(run, StepResult(StepOutcome.SUCCEEDED, "all steps done"), None, [])
            return
        step = get_step(run.step_name)
        if run.dry_run:
            what = step.describe.format(node=run.node.name, pool=_pool_word(run.action))
            row = self._step_row(run, StepOutcome.DRY_RUN, f"would {what}", finished=True)
            self._finish(run, StepResult(StepOutcome.DRY_RUN, f"would {what}"), row, [])
            return
        row = None if step.polls else self._step_row(run, StepOutcome.STARTED, "")
        ctx = self._context(run, row)
        result = self._call(step, run, ctx)
        self._finish(run, result, row, ctx.after_commit, context=ctx.context)

    def _context(self, run: Remediation, row: RemediationStep | None) -> StepContext:
        return StepContext(
            backend=self.backend_for(run.node.cluster),
            fleet=self.fleet_for(run.node.cluster),
            validator=self.validator,
            now=timezone.now(),
            context=dict(run.context),
            attempt=row.attempt if row else 1,
            save=lambda context: self._save_context(run, context),
        )

    def _call(self, step, run: Remediation, ctx: StepContext) -> StepResult:
        try:
            return step.run(run, ctx)
        except LeaseLost as error:
            return StepResult(StepOutcome.FAILED, str(error))
        except BackendError as error:
            if error.permanent:
                return StepResult(StepOutcome.FAILED, error.message)
            return self._transient(run, error)
        except Exception as error:  # a bug in one step must not stop every other run
            logger.exception("Step %s of run %s crashed", step.name, run.pk)
            return StepResult(
                StepOutcome.NEEDS_ATTENTION, f"step {step.name} crashed: {error!r}"[:400]
            )

    def _transient(self, run: Remediation, error: BackendError) -> StepResult:
        failed = run.steps.filter(index=run.current_step, outcome=StepOutcome.FAILED)
        retried = parse_datetime(run.context.get("retried_at") or "")
        if retried is not None:  # an admin's retry starts the count again
            failed = failed.filter(started_at__gte=retried)
        failures = failed.count()
        if failures + 1 >= MAX_TRANSIENT_FAILURES:
            return StepResult(
                StepOutcome.NEEDS_ATTENTION,
                f"gave up after {failures + 1} attempts: {error.message}",
            )
        delay = min(2.0 ** (failures + 1), MAX_BACKOFF_S)
        return StepResult(
            StepOutcome.FAILED,
            f"retrying in {delay:g}s: {error.message}",
            retry_after=timedelta(seconds=delay),
        )

    def _save_context(self, run: Remediation, context: dict) -> None:
        """Persist the context now (the step's intent), renewing the lease."""
        saved = Remediation.objects.filter(pk=run.pk, claimed_by=self.worker).update(
            context=context, **self._lease_values()
        )
        if not saved:
            raise LeaseLost(f"run {run.pk} is no longer leased to {self.worker}")

    def _step_row(
        self, run: Remediation, outcome: str, message: str, *, finished: bool = False
    ) -> RemediationStep:
        now = timezone.now()
        attempt = run.steps.filter(index=run.current_step).count() + 1
        row = RemediationStep.objects.create(
            remediation=run,
            index=run.current_step,
            name=run.step_name,
            attempt=attempt,
            outcome=outcome,
            message=message[:500],
            worker=self.worker,
            started_at=now,
            finished_at=now if finished else None,
        )
        with live.one_trip():  # the step's row and the pages of the run's jobs
            services.publish_step(row)
        return row

    def _crashed(self, run: Remediation, error: Exception) -> None:
        """Advancing `run` raised outside its step (recording its result, say): try it
        again after a backoff, and after MAX_CRASHES park it in needs_attention with the
        error, so that it never takes the worker's every pass."""
        logger.exception("Advancing run %s crashed", run.pk)
        run = Remediation.objects.filter(pk=run.pk, claimed_by=self.worker).first()
        if run is None:
            return  # another worker took it over
        crashes = int(run.context.get("crashes") or 0) + 1
        context = {**run.context, "crashes": crashes}
        release = {"claimed_by": "", "claimed_until": None, "context": context}
        guard = {"claimed_by": self.worker}
        if crashes >= MAX_CRASHES and run.status in (RunStatus.RUNNING, RunStatus.WAITING):
            message = f"step {run.step_name} crashed {crashes} times: {error!r}"[:400]
            services.transition(
                run, RunStatus.NEEDS_ATTENTION, message=message, guard=guard, **release
            )
            return
        delay = timedelta(seconds=min(2.0**crashes, MAX_BACKOFF_S))
        Remediation.objects.filter(pk=run.pk, **guard).update(
            due_at=timezone.now() + delay, **release
        )

    # ------------------------------------------------------------- recording
    def _finish(self, run, result, row, callbacks, *, context=None) -> None:
        # A step's publishes (its row, the run, the node, the job pages) in one trip.
        with live.one_trip(), transaction.atomic():
            self._record_row(run, result, row)
            moved = self._move(run, result, context if context is not None else run.context)
            if moved:
                on_commit_all(callbacks)
            else:
                logger.warning(
                    "Run %s changed under worker %s; result dropped", run.pk, self.worker
                )

    def _record_row(self, run, result, row) -> None:
        # The step's row says the step failed; the run's status says it needs attention.
        outcome = result.outcome
        if outcome == StepOutcome.NEEDS_ATTENTION:
            outcome = StepOutcome.FAILED
        if row is None:
            # Polling steps write a row only when their outcome changes; repeated
            # "still waiting" polls refresh that row's message instead of adding rows.
            last = run.steps.filter(index=run.current_step).order_by("-id").first()
            if last is not None and last.outcome == outcome and outcome == StepOutcome.WAITING:
                RemediationStep.objects.filter(pk=last.pk).update(message=result.message[:500])
                return
            self._step_row(run, outcome, result.message, finished=True)
            return
        if row.outcome == StepOutcome.DRY_RUN:
            return
        now = timezone.now()
        RemediationStep.objects.filter(pk=row.pk, outcome=StepOutcome.STARTED).update(
            outcome=outcome, message=result.message[:500], finished_at=now
        )
        row.outcome, row.message, row.finished_at = outcome, result.message[:500], now
        services.publish_step(row)

    def _move(self, run: Remediation, result: StepResult, context: dict) -> bool:
        """Advance, park or end the run, guarded by this worker's lease."""
        now = timezone.now()
        fields = {"context": context, "claimed_by": "", "claimed_until": None}
        guard = {"claimed_by": self.worker, "current_step": run.current_step}
        outcome = result.outcome
        if outcome in DONE:
            fields.update(current_step=run.current_step + 1, due_at=now)
            if run.current_step + 1 >= len(run.planned_steps):
                message = "dry run: nothing was changed" if run.dry_run else "all steps done"
                if context.get("left_held_for"):
                    message += f"; left drained for: {context['left_held_for']}"
                return self._transition(run, RunStatus.SUCCEEDED, message, fields, guard)
            if run.status == RunStatus.WAITING:
                return self._transition(run, RunStatus.RUNNING, result.message, fields, guard)
            return self._update(run, fields, guard)
        if outcome == StepOutcome.WAITING or result.retry_after > timedelta(0):
            fields["due_at"] = now + result.retry_after
            if run.status == RunStatus.RUNNING:
                return self._transition(run, RunStatus.WAITING, result.message, fields, guard)
            return self._update(run, {**fields, "message": result.message[:500]}, guard)
        if outcome == StepOutcome.NEEDS_ATTENTION:
            return self._transition(run, RunStatus.NEEDS_ATTENTION, result.message, fields, guard)
        return self._transition(run, RunStatus.FAILED, result.message, fields, guard)

    def _transition(self, run, status, message, fields, guard) -> bool:
        # A step that was waiting finished the plan: waiting -> running -> succeeded,
        # both moves in the history, as the table has no shortcut.
        detour = status not in ALLOWED[RunStatus(run.status)]
        if detour and not services.transition(
            run, RunStatus.RUNNING, message="resumed", guard=guard
        ):
            return False
        return services.transition(run, status, message=message, guard=guard, **fields)

    def _update(self, run, fields, guard) -> bool:
        fields = {**fields, "updated_at": timezone.now()}
        return bool(
            Remediation.objects.filter(pk=run.pk, status=run.status, **guard).update(**fields)
        )


class LeaseLost(Exception):
    """Another worker took the run over (this one was too slow); stop acting on it."""


def _pool_word(action: str) -> str:
    return {"to_inference": "inference", "to_training": "training"}.get(action, "")
