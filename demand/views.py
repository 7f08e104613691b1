"""Pages: the Capacity page, its "what if" replay, and the reallocation policies.

Each view parses, authorizes and calls one function; the forms are plain POSTs.
"""

from __future__ import annotations

from datetime import timedelta

from django.contrib import messages
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from clusters.models import Cluster
from core.roles import Role, role_required
from demand import charts, history, replay
from demand.forms import PolicyForm
from demand.models import DemandDecision, ReallocationPolicy
from demand.policies import PolicyInvalid, as_rules, save_policy
from identity.cluster_view import viewed_cluster

DAY_CHOICES = (1, 2, 7, 14, 30)
DEFAULT_DAYS = 2
DECISIONS_SHOWN = 50
HISTORY_SHOWN = 50
MOVES_SHOWN = 100


def _days(request) -> int:
    raw = request.GET.get("days", "")
    return int(raw) if raw.isdigit() and int(raw) in DAY_CHOICES else DEFAULT_DAYS


def _cluster(request) -> Cluster | None:
    """The cluster the switcher shows (or ?cluster= names); pools are a cluster's own, so
    with all clusters shown the page opens on the first with a policy."""
    shown = viewed_cluster(request)
    if shown is not None:
        return shown
    clusters = Cluster.objects.order_by("name")
    with_policy = ReallocationPolicy.objects.order_by("cluster__name").first()
    return with_policy.cluster if with_policy else clusters.first()


@role_required(Role.MANAGER, Role.ADMIN)
def capacity(request):
    """Pool sizes over time, the demand signals, recent decisions and the managers'
    GPU-hours by pool per day against a static split."""
    cluster, days = _cluster(request), _days(request)
    end = timezone.now()
    start = end - timedelta(days=days)
    context = {"cluster": cluster, "days": days, "day_choices": DAY_CHOICES, "figures": []}
    context["clusters"] = Cluster.objects.order_by("name")
    if cluster is not None:
        policies = list(
            ReallocationPolicy.objects.filter(cluster=cluster).select_related(
                "training_pool", "inference_pool"
            )
        )
        target = policies[0].inference_target if policies else None
        context["figures"] = [
            ("pools", charts.pool_sizes(cluster, start, end)),
            ("load", charts.inference_load(cluster, start, end, target)),
            ("training", charts.training_queue(cluster, start, end)),
        ]
        context["policies"] = policies
        context["decisions"] = DemandDecision.objects.filter(policy__cluster=cluster)[
            :DECISIONS_SHOWN
        ]
        context["pool_days"] = history.pool_days(cluster, start, end)
    return render(request, "demand/capacity.html", context)


@role_required(Role.ADMIN)
def what_if(request, pk: int):
    """A policy replayed over the recorded signals of the last N days, nothing moved."""
    policy = get_object_or_404(ReallocationPolicy.objects.select_related("cluster"), pk=pk)
    days = _days(request)
    end = timezone.now()
    frames = history.frames(policy, end - timedelta(days=days), end)
    result = replay.replay(as_rules(policy), frames, history.gpus_per_node(policy.cluster))
    context = {
        "policy": policy,
        "days": days,
        "day_choices": DAY_CHOICES,
        "result": result,
        "moves": result.moves[:MOVES_SHOWN],
        "frames": len(frames),
    }
    return render(request, "demand/what_if.html", context)


@role_required(Role.ADMIN)
def policy_list(request):
    policies = ReallocationPolicy.objects.select_related(
        "cluster", "training_pool", "inference_pool", "updated_by"
    )
    context = {"policies": policies, "clusters": Cluster.objects.order_by("name")}
    return render(request, "demand/policy_list.html", context)


@require_http_methods(["GET", "POST"])
@role_required(Role.ADMIN)
def policy_edit(request, pk: int | None = None):
    policy = get_object_or_404(ReallocationPolicy, pk=pk) if pk is not None else None
    cluster = policy.cluster if policy else _cluster(request)
    if cluster is None:
        raise Http404("No cluster yet: a policy belongs to a cluster's pools")
    form = PolicyForm(request.POST or None, instance=policy, cluster=cluster)
    if request.method == "POST":
        if form.is_valid():
            try:
                saved = save_policy(form.instance, user=request.user)
            except PolicyInvalid as invalid:  # changed meanwhile (a pool's size)
                for field, error in invalid.errors.items():
                    form.add_error(field if field in form.fields else None, error)
            else:
                messages.success(request, f"Reallocation policy saved: {saved}.")
                return redirect("demand-policies")
        return render(request, "demand/policy_form.html", _policy_ctx(form, policy), status=400)
    return render(request, "demand/policy_form.html", _policy_ctx(form, policy))


def _policy_ctx(form: PolicyForm, policy: ReallocationPolicy | None) -> dict:
    context = {"form": form, "policy": policy, "history": [], "decisions": []}
    if policy is not None:
        context["history"] = policy.changes.select_related("changed_by")[:HISTORY_SHOWN]
        context["decisions"] = policy.decisions.all()[:10]
    context["cluster"] = form.cluster
    return context
