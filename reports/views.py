"""The reports page: one report at a time, filters via htmx, `?print=1` for paper."""

from __future__ import annotations

from dataclasses import replace
from urllib.parse import urlencode

from django.http import Http404
from django.shortcuts import render

from core.roles import Role, role_required
from reports.catalog import REPORTS, compute, controls
from reports.charts import figures
from reports.params import default_query, known_clusters, report_form

MANAGERS = (Role.MANAGER, Role.ADMIN)


@role_required(*MANAGERS)
def report_page(request, name: str = "utilization"):
    if name not in REPORTS:
        raise Http404("No such report")
    form = report_form(request)
    printing = request.GET.get("print") == "1"
    sections = []
    groupings, bucketed = controls(name)
    clusters = known if len(known := known_clusters()) > 1 else []
    if form.is_valid():
        query = form.query()
        if query.group not in groupings and not printing:
            # A grouping another tab offered, which this one cannot split by.
            query = replace(query, group="")
        # Paper gets every report; the screen computes only the one being looked at.
        names = list(REPORTS) if printing else [name]
        for each in names:
            report = compute(each, query)
            sections.append({"report": report, "figures": _figures(report)})
    else:
        query = default_query()
    context = {
        "name": name,
        "form": form,
        "query": query,
        "querystring": urlencode(query.as_params()),
        "sections": sections,
        "tabs": [(key, title) for key, (title, _) in REPORTS.items()],
        "group_choices": [(value, value or "none") for value in groupings],
        "selected_group": query.group or (groupings[0] if groupings else ""),
        "bucketed": bucketed,
        # The cluster field, and the cluster in the titles, only where there is a choice.
        "clusters": clusters,
        "scope_label": query.cluster_label if clusters or query.cluster else "",
    }
    if printing:
        return render(request, "reports/print.html", context)
    if request.htmx and request.htmx.target == "report-body":
        return render(request, "reports/partials/body.html", context)
    return render(request, "reports/page.html", context)


def _figures(report) -> list[dict]:
    return [
        {
            "id": f"figure-{report.name}-{n}",
            "data_id": f"figure-data-{report.name}-{n}",
            "figure": f,
        }
        for n, f in enumerate(figures(report), start=1)
    ]
