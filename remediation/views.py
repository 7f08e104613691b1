"""Pages: runs and their live timelines, approvals, policies, replay, node actions.

Each view parses, authorizes and calls one function of `actions`; every form is
a plain POST so the pages work without JavaScript, and htmx only enhances.
"""

from __future__ import annotations

from collections import Counter
from urllib.parse import quote

from django.contrib import messages
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST

from clusters import drift
from clusters.addresses import asks_which_cluster, node_at, node_named, node_url
from clusters.models import Cluster, Node
from core.grafana import run_dashboard_url
from core.roles import ANY_ROLE, Role, role_required
from demand.charts import run_evidence
from health.models import Incident
from identity.cluster_view import viewed_cluster, viewed_name
from portal.regions import pushable, shared_region
from remediation import actions, admission, services
from remediation.forms import (
    ActionRequestForm,
    DecisionForm,
    PolicyForm,
    ReplayForm,
    RunFilterForm,
)
from remediation.models import Action, Policy, Remediation, Trigger, action_words
from remediation.replay import replay as replay_policies
from remediation.services import RUNS_REGION
from remediation.transitions import RunStatus

RUN_LIST_LIMIT = 200
UNDECIDABLE_SHOWN = 50
POLICY_HISTORY_SHOWN = 50
DECISIONS = {
    "approve": actions.approve,
    "reject": actions.reject,
    "cancel": actions.cancel,
    "retry": actions.retry,
    "release": actions.cancel_and_release,
}
PAST = {
    "approve": "approved",
    "reject": "rejected",
    "cancel": "cancelled",
    "retry": "retried",
    "release": "cancelled; the node is being released by a new run",
}
RUN_RELATED = ("node", "requested_by", "approved_by", "policy")


@pushable("run-rows")
@role_required(*ANY_ROLE)
def run_list(request):
    form = RunFilterForm(request.GET)
    runs = form.apply(Remediation.objects.select_related(*RUN_RELATED, "node__cluster"))
    shown = viewed_cluster(request)
    if shown is not None:
        runs = runs.filter(node__cluster=shown)
    context = {
        "runs": runs[:RUN_LIST_LIMIT],
        "form": form,
        "actions": Action.choices,
        "triggers": Trigger.choices,
        "limit": RUN_LIST_LIMIT,
    }
    if request.htmx and request.htmx.target == "run-rows":
        rows = lambda: render(request, "remediation/partials/run_rows.html", context)  # noqa: E731
        return shared_region(request, RUNS_REGION, rows, viewer=f"@{viewed_name(request)}")
    return render(request, "remediation/run_list.html", context)


@role_required(*ANY_ROLE)
def run_detail(request, pk: int):
    return _render_run(request, _get_run(pk))


def _get_run(pk: int) -> Remediation:
    return get_object_or_404(
        Remediation.objects.select_related(*RUN_RELATED, "incident", "node__cluster"), pk=pk
    )


def _with_demand_chart(run: Remediation) -> bool:
    """A demand run carries a small chart of the signal it was decided on."""
    demand = (run.context or {}).get("demand") if run.trigger == Trigger.DEMAND else None
    run.demand_figure = run_evidence(run.node.cluster, demand) if demand else None
    run.demand_figure_id = f"figure-data-run-{run.pk}"
    return run.demand_figure is not None


def _render_run(request, run: Remediation, *, form=None, error: str = "", status: int = 200):
    _with_demand_chart(run)
    context = {
        "run": run,
        "steps": run.steps.all(),
        "changes": run.status_changes.all(),
        "form": form or DecisionForm(),
        "error": error,
        "impact": _impact_if_awaiting(run),
        "grafana_url": run_dashboard_url(
            run.node.cluster.name, run.node.name, run.created_at, run.finished_at
        ),
    }
    return render(request, "remediation/run_detail.html", context, status=status)


def _impact_if_awaiting(run: Remediation):
    if run.status == RunStatus.NEEDS_ATTENTION:
        # A retry runs the plan on from the step that stopped.
        return actions.run_impact(run, from_step=run.current_step)
    if run.status != RunStatus.AWAITING_APPROVAL:
        return None
    return actions.run_impact(run)


@require_POST
@role_required(Role.ADMIN)
def decide(request, pk: int, verdict: str):
    """Approve, reject or cancel a run; errors come back on the run's page."""
    if verdict not in DECISIONS:
        raise Http404("No such decision")
    run = _get_run(pk)
    form = DecisionForm(request.POST)
    if not form.is_valid():
        return _render_run(request, run, form=form, status=400)
    try:
        DECISIONS[verdict](run, request.user, form.cleaned_data["comment"])
    except actions.ActionError as error:
        form.add_error("comment", error.message)
        return _render_run(request, run, form=form, status=400)
    except actions.NotPermitted as error:
        return _render_run(request, run, form=form, error=str(error), status=403)
    except actions.WrongStatus as error:
        return _render_run(request, run, form=form, error=str(error), status=409)
    messages.success(request, f"Run {run.pk} {PAST[verdict]}.")
    return redirect(_next_url(request, reverse("remediation-detail", args=[run.pk])))


def _next_url(request, default: str) -> str:
    target = request.POST.get("next", "")
    # Only a path on this site: redirect() reads a bare word as a URL name, and a
    # `next` naming none was a NoReverseMatch (a 500).
    if target.startswith("/") and url_has_allowed_host_and_scheme(target, {request.get_host()}):
        return target
    return default


@role_required(Role.ADMIN)
def approvals(request):
    """The runs awaiting approval and the undecidable incidents of the cluster shown."""
    shown = viewed_cluster(request)
    runs = Remediation.objects.filter(status=RunStatus.AWAITING_APPROVAL).select_related(
        *RUN_RELATED, "node__pool", "node__cluster"
    )
    if shown is not None:
        runs = runs.filter(node__cluster=shown)
    queue = [(run, actions.run_impact(run)) for run in runs]
    charts = [_with_demand_chart(run) for run, _ in queue]
    context = {
        "demand_charts": any(charts),
        "queue": queue,
        "form": DecisionForm(),
        "undecidable": admission.undecidable(shown and shown.pk)[:UNDECIDABLE_SHOWN],
    }
    return render(request, "remediation/approvals.html", context)


@require_POST
@role_required(Role.ADMIN)
def decide_incident_again(request, pk: int):
    incident = get_object_or_404(Incident, pk=pk)
    decisions = admission.decide_again(incident)
    outcome = decisions[0].outcome or decisions[0].reason if decisions else "decided"
    messages.success(request, f"Incident {pk} on {incident.node.name}: {outcome}.")
    return redirect(_next_url(request, reverse("remediation-approvals")))


@role_required(Role.ADMIN)
def policy_list(request):
    rows = Policy.objects.select_related("updated_by")
    return render(request, "remediation/policy_list.html", {"policies": rows})


@require_http_methods(["GET", "POST"])
@role_required(Role.ADMIN)
def policy_edit(request, pk: int | None = None):
    policy = get_object_or_404(Policy, pk=pk) if pk is not None else None
    form = PolicyForm(request.POST or None, instance=policy)
    if request.method == "POST":
        if form.is_valid():
            saved = actions.save_policy(form.save(commit=False), user=request.user)
            messages.success(request, f"Policy saved: {saved}.")
            return redirect("remediation-policies")
        return render(
            request, "remediation/policy_form.html", _policy_ctx(form, policy), status=400
        )
    return render(request, "remediation/policy_form.html", _policy_ctx(form, policy))


def _policy_ctx(form: PolicyForm, policy: Policy | None) -> dict:
    history = []
    if policy is not None:
        history = policy.changes.select_related("changed_by")[:POLICY_HISTORY_SHOWN]
    return {"form": form, "policy": policy, "history": history}


@role_required(Role.ADMIN)
def replay(request):
    """What the policies would have done over past health events; changes nothing."""
    form = ReplayForm(request.GET or None)
    decisions = None
    if form.is_bound and form.is_valid():
        shown = viewed_cluster(request)
        decisions = replay_policies(*form.period(), cluster_id=shown and shown.pk)
    status = 400 if form.is_bound and form.errors else 200
    context = {"form": form, "decisions": decisions, "summary": _summary(decisions or [])}
    return render(request, "remediation/replay.html", context, status=status)


def _summary(decisions: list) -> list[tuple[str, str, int]]:
    """(action, mode, how many incidents) for the replay's headline, commonest first."""
    counts = Counter((d.action or "nothing", d.mode) for d in decisions)
    return [(action, mode, n) for (action, mode), n in counts.most_common()]


@require_http_methods(["GET", "POST"])
@role_required(Role.ADMIN)
@asks_which_cluster
def node_action(request, name: str, action: str, cluster: str = ""):
    """GET: what the action would touch, and a confirm form. POST: start the run."""
    if action not in actions.ADMIN_ACTIONS:
        raise Http404("No such action")
    node = _node(Node.objects.select_related("pool", "cluster"), cluster, name)
    form = ActionRequestForm(request.POST or None)
    context = {"node": node, "action": action, "form": form, "busy": None}
    if request.method != "POST":
        return _render_action(request, context)
    if not form.is_valid():
        return _render_action(request, context, status=400)
    try:
        run = actions.request_action(node, action, user=request.user, **form.cleaned_data)
    except actions.ActionError as error:
        form.add_error(error.field if error.field in form.fields else None, error.message)
        return _render_action(request, context, status=400)
    except services.NodeBusy as busy:
        context["busy"] = busy.existing
        return _render_action(request, context, status=409)
    what = action_words(run.action)
    messages.success(request, f"Run {run.pk} started: {what} on {node.name}.")
    return redirect("remediation-detail", pk=run.pk)


@require_POST
@role_required(Role.ADMIN)
@asks_which_cluster
def node_repair(request, name: str, cluster: str = ""):
    """Mark a failed node as in repair, with a ticket or note; back to the node page."""
    node = _node(Node.objects.select_related("cluster"), cluster, name)
    back = node_url(node.cluster.name, node.name)
    try:
        actions.mark_in_repair(node, user=request.user, note=request.POST.get("note", ""))
    except actions.ActionError as error:
        messages.error(request, error.message)
        return redirect(back)
    except actions.WrongStatus as error:
        messages.error(request, str(error))
        return redirect(back)
    messages.success(request, f"{node.name} is in repair.")
    return redirect(back)


def _node(nodes, cluster: str, name: str) -> Node:
    """The node at its cluster address, or by name alone where that is one node's."""
    return node_at(nodes, cluster, name) if cluster else node_named(nodes, name)


@require_http_methods(["GET", "POST"])
@role_required(Role.ADMIN)
def partition_edits(request):
    """Partition edits made outside Medbay to nodes it had moved, of the cluster shown
    (or of each cluster): adopt them here, one cluster's at a time."""
    if request.method == "POST":
        return _adopt_edits(request)
    shown = viewed_cluster(request)
    clusters = [shown] if shown else list(Cluster.objects.order_by("name"))
    with_edits = [cluster for cluster in clusters if cluster.partition_edits]
    several = Cluster.objects.count() > 1
    context = {"clusters": with_edits, "several": several}
    return render(request, "remediation/partition_edits.html", context)


def _adopt_edits(request):
    # The form names its cluster; a form from before clusters had one is the only
    # cluster's, and where there are several it adopts nothing rather than guess.
    name = request.POST.get("cluster", "")
    clusters = Cluster.objects.filter(name=name[:64]) if name else Cluster.objects.all()
    found = list(clusters[:2])
    if len(found) != 1:
        messages.error(request, "Say which cluster's partition edits to adopt.")
        return redirect("partition-edits")
    cluster = found[0]
    adopted = drift.adopt(cluster, request.POST.getlist("node"), actor=request.user.get_username())
    if adopted:
        where = f" on {cluster.name}" if Cluster.objects.count() > 1 else ""
        messages.success(request, f"Adopted Slurm's partitions{where} for {', '.join(adopted)}.")
    return redirect(reverse("partition-edits") + f"?cluster={quote(cluster.name)}")


def _render_action(request, context: dict, *, status: int = 200):
    context["impact"] = actions.impact_preview(context["node"], context["action"])
    return render(request, "remediation/node_action.html", context, status=status)
