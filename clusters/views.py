"""Pages: the live board, the node detail page, and the clusters' configuration."""

from __future__ import annotations

from dataclasses import replace

from django.contrib import messages
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from clusters import canvas, configure
from clusters.addresses import asks_which_cluster, node_at, node_named, node_url
from clusters.board import (
    BoardFilter,
    banner_context,
    board_rows,
    count_gpus,
    render_tiles,
    tiles_qualified,
)
from clusters.config import ClusterConfig, ClusterConfigError
from clusters.forms import ClusterForm, initial_for
from clusters.live import COUNTS_REGION, PROBLEMS_REGION
from clusters.models import Cluster, Node, NodeStatus, Partition, PoolKind
from core.grafana import node_dashboard_url
from core.roles import ANY_ROLE, Role, is_admin, role_required
from health.queries import recent_events_for_node
from identity.cluster_view import viewed_cluster, viewed_name
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
        # Everyone sees the same counts for the same filters and cluster: one rendering
        # for all who look at that cluster.
        viewer = f"cluster:{viewed_name(request)}"
        return shared_region(request, target, lambda: _board(request), viewer=viewer)
    return _board(request)


def board_filter(request) -> BoardFilter:
    """The page's filters, on the cluster it shows."""
    cluster = viewed_cluster(request)
    return replace(BoardFilter.from_query(request.GET), cluster_id=cluster and cluster.pk)


def _partitions(cluster_id: int | None):
    partitions = Partition.objects.order_by("name")
    if cluster_id is not None:
        partitions = partitions.filter(cluster_id=cluster_id)
    return partitions.values_list("name", flat=True).distinct()


def _board(request):
    node_filter = board_filter(request)
    problems = request.htmx and request.htmx.target == PROBLEMS_REGION
    if problems or node_filter.apply(Node.objects.all()).count() > canvas.tiles_max():
        return _fleet(request, node_filter)
    rows, gpus = board_rows(node_filter)
    # As clusters.live sends them to the boards of all clusters.
    qualified = node_filter.cluster_id is None and tiles_qualified()
    context = {
        "tiles": render_tiles(rows, gpus, qualified=qualified),
        "node_count": len(rows),
        "counts": count_gpus(rows, gpus),
        "filter": node_filter,
        "partitions": _partitions(node_filter.cluster_id),
        "pools": PoolKind.choices,
        "statuses": NodeStatus.choices,
        **banner_context(viewed_cluster(request)),
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
    context.update(
        problems=problems,
        problem_count=problem_count,
        shown=canvas.PROBLEM_ROWS,
        # All clusters: each row names its cluster, where two may share a node's name.
        several=node_filter.cluster_id is None and tiles_qualified(),
    )
    if target == PROBLEMS_REGION:
        return render(request, "clusters/partials/fleet_problems.html", context)
    context.update(
        node_count=node_filter.apply(Node.objects.all()).count(),
        partitions=_partitions(node_filter.cluster_id),
        pools=PoolKind.choices,
        statuses=NodeStatus.choices,
        **banner_context(viewed_cluster(request)),
        data_url=f"{reverse('fleet-data')}?{_with_cluster(request).urlencode()}",
        node_url=_fleet_node_url(),
    )
    return render(request, "clusters/fleet.html", context)


def _fleet_node_url() -> str:
    # static/js/fleet.js puts a node's cluster for CLUSTER and its name for NODE.
    return reverse("cluster-node", args=["CLUSTER", "NODE"])


def _with_cluster(request):
    """The page's query, naming the cluster it shows where its address does not."""
    params = request.GET.copy()
    if viewed_cluster(request) is not None:
        params["cluster"] = viewed_name(request)
    return params


@role_required(*ANY_ROLE)
def fleet_data(request):
    """The fleet view's payload: node names and one letter per GPU, grouped by partition."""
    return JsonResponse(canvas.payload(board_filter(request)))


@role_required(*ANY_ROLE)
def node_detail(request, cluster: str, name: str):
    node = node_at(
        Node.objects.select_related("pool", "cluster").prefetch_related("gpus"), cluster, name
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


@role_required(*ANY_ROLE)
@asks_which_cluster
def node_by_name(request, name: str):
    """The address by name alone: to the node's cluster address, or a choice of clusters."""
    node = node_named(Node.objects.select_related("cluster"), name)
    return redirect(node_url(node.cluster.name, node.name))


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
