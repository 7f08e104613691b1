"""Pages: the live board, the node detail page, and the clusters' configuration."""

from __future__ import annotations

from django.contrib import messages
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from clusters import canvas, configure
from clusters.board import BoardFilter, board_rows, count_gpus, render_tiles
from clusters.config import ClusterConfig, ClusterConfigError
from clusters.forms import ClusterForm, initial_for
from clusters.live import COUNTS_REGION, PROBLEMS_REGION
from clusters.models import Cluster, Node, NodeStatus, Partition, PoolKind
from core.grafana import node_dashboard_url
from core.roles import ANY_ROLE, Role, is_admin, role_required
from health.queries import recent_events_for_node
from jobs.models import ACTIVE_JOB_STATES
from portal.healthz import healthz as portal_healthz
from portal.regions import pushable, shared_region
from remediation.actions import action_menu
from remediation.slurm_requests import requests_for


@pushable(COUNTS_REGION, PROBLEMS_REGION)
@role_required(*ANY_ROLE)
def board(request):
    target = request.htmx.target if request.htmx else None
    if target in (COUNTS_REGION, PROBLEMS_REGION):
        # Everyone sees the same counts for the same filters: one rendering for all.
        return shared_region(request, target, lambda: _board(request))
    return _board(request)


def _board(request):
    node_filter = BoardFilter.from_query(request.GET)
    problems = request.htmx and request.htmx.target == PROBLEMS_REGION
    if problems or node_filter.apply(Node.objects.all()).count() > canvas.tiles_max():
        return _fleet(request, node_filter)
    rows, gpus = board_rows(node_filter)
    context = {
        "tiles": render_tiles(rows, gpus),
        "node_count": len(rows),
        "counts": count_gpus(rows, gpus),
        "filter": node_filter,
        "partitions": Partition.objects.values_list("name", flat=True).distinct(),
        "pools": PoolKind.choices,
        "statuses": NodeStatus.choices,
        "cluster": Cluster.objects.order_by("pk").first(),
    }
    if request.htmx and request.htmx.target == "board-body":
        return render(request, "clusters/partials/board_body.html", context)
    if request.htmx and request.htmx.target == COUNTS_REGION:
        return render(request, "clusters/partials/counts.html", context)
    return render(request, "clusters/board.html", context)


def _fleet(request, node_filter: BoardFilter):
    """The board of a large cluster: a canvas of every GPU, drawn by static/js/fleet.js."""
    target = request.htmx.target if request.htmx else None
    context = {"counts": canvas.counts(node_filter), "filter": node_filter}
    if target == COUNTS_REGION:
        return render(request, "clusters/partials/counts.html", context)
    problems, problem_count = canvas.problem_rows(node_filter)
    context.update(problems=problems, problem_count=problem_count, shown=canvas.PROBLEM_ROWS)
    if target == PROBLEMS_REGION:
        return render(request, "clusters/partials/fleet_problems.html", context)
    context.update(
        node_count=node_filter.apply(Node.objects.all()).count(),
        partitions=Partition.objects.values_list("name", flat=True).distinct(),
        pools=PoolKind.choices,
        statuses=NodeStatus.choices,
        cluster=Cluster.objects.order_by("pk").first(),
        data_url=f"{reverse('fleet-data')}?{request.GET.urlencode()}",
        node_url=reverse("node-detail", args=["NODE"]),
    )
    return render(request, "clusters/fleet.html", context)


@role_required(*ANY_ROLE)
def fleet_data(request):
    """The fleet view's payload: node names and one letter per GPU, grouped by partition."""
    return JsonResponse(canvas.payload(BoardFilter.from_query(request.GET)))


@role_required(*ANY_ROLE)
def node_detail(request, name: str):
    node = get_object_or_404(
        Node.objects.select_related("pool", "cluster").prefetch_related("gpus"),
        name=name,
    )
    context = {
        "node": node,
        "jobs": node.jobs.filter(state__in=ACTIVE_JOB_STATES).order_by("-slurm_id"),
        "changes": node.state_changes.all()[:50],
        "health_events": recent_events_for_node(node),
        "runs": node.remediations.select_related("requested_by")[:20],
        "undecidable": node.incidents.exclude(decision_error="").order_by("-pk")[:10],
        "cleared": node.incidents.exclude(cleared_at=None).order_by("-cleared_at")[:5],
        "node_actions": action_menu(node) if is_admin(request.user) else [],
        "slurm_requests": requests_for(node),
        "grafana_url": node_dashboard_url(node.cluster.name, node.name),
    }
    return render(request, "clusters/node_detail.html", context)


def healthz(request):
    return portal_healthz(request)


@role_required(Role.ADMIN)
def cluster_list(request):
    """Every cluster this portal watches and how it reaches it (file paths, never secrets)."""
    clusters = Cluster.objects.order_by("name")
    rows = [(cluster, cluster.config()) for cluster in clusters]
    return render(request, "clusters/cluster_list.html", {"rows": rows})


CLUSTER_HISTORY_SHOWN = 20


@role_required(Role.ADMIN)
def cluster_new(request):
    form = ClusterForm(
        request.POST or None, adding=True, initial=initial_for(ClusterConfig(), True)
    )
    if request.method == "POST" and form.is_valid():
        try:
            cluster = configure.add_cluster(
                form.cleaned_data["name"], form.config, by=request.user.get_username()
            )
        except ClusterConfigError as error:  # the name was taken meanwhile
            form.add_config_errors(error)
        else:
            if not form.cleaned_data["enabled"]:
                configure.set_enabled(cluster.name, False, by=request.user.get_username())
            messages.success(request, f"Cluster {cluster.name} added.")
            return redirect("cluster-list")
    status = 400 if request.method == "POST" else 200
    return render(request, "clusters/cluster_form.html", {"form": form}, status=status)


@role_required(Role.ADMIN)
def cluster_edit(request, cluster: str):
    row = get_object_or_404(Cluster, name=cluster)
    initial = initial_for(row.config(), row.enabled)
    form = ClusterForm(request.POST or None, adding=False, initial=initial)
    if request.method == "POST" and form.is_valid():
        values = {
            field: getattr(form.config, field) for field in ClusterConfig.__dataclass_fields__
        }
        enabled = form.cleaned_data["enabled"]
        configure.edit_cluster(row.name, by=request.user.get_username(), enabled=enabled, **values)
        messages.success(request, f"Cluster {row.name} saved.")
        return redirect("cluster-list")
    context = {
        "form": form,
        "cluster": row,
        "history": row.changes.all()[:CLUSTER_HISTORY_SHOWN],
    }
    status = 400 if request.method == "POST" else 200
    return render(request, "clusters/cluster_form.html", context, status=status)
