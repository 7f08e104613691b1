"""The header's cluster switcher: remember which cluster a person's pages show."""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit

from django.contrib import messages
from django.http import QueryDict
from django.shortcuts import redirect
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from core.roles import ANY_ROLE, role_required
from identity.cluster_view import ALL_CLUSTERS, choose_cluster


@require_POST
@role_required(*ANY_ROLE)
def choose(request):
    try:
        cluster = choose_cluster(request.user, request.POST.get("cluster", ALL_CLUSTERS))
    except ValueError as error:
        messages.error(request, str(error))
    else:
        messages.success(request, f"Showing {cluster.name if cluster else 'all clusters'}.")
    return redirect(_back_to(request))


def _back_to(request) -> str:
    """The page the switch was made on, less any `cluster=` of its own, which would
    otherwise go on naming the cluster just left; the board where that is not ours."""
    target = request.POST.get("next", "")
    if not (
        target.startswith("/")
        and url_has_allowed_host_and_scheme(target, {request.get_host()}, require_https=False)
    ):
        return "/"
    parts = urlsplit(target)
    query = QueryDict(parts.query, mutable=True)
    query.pop("cluster", None)
    query.pop("page", None)  # page 5 of one cluster's queue may not exist in another's
    rest = urlencode(list(query.lists()), doseq=True)
    return parts.path + (f"?{rest}" if rest else "")
