"""One render of a live region for all who see it alike.

When a list changes, every open page showing it is poked and fetches its rows
again: a hundred admins on the event feed would render the same rows a
hundred times. A region's rendering is kept under its live version (bumped by
each poke, portal.live), the request's path and query, and who is looking —
everyone alike, or one user where rows depend on the viewer (a researcher's
queue under PrivateData) — so the next viewer of the same version gets it
ready-made. Only regions without forms are kept: a CSRF token is one user's.

Such a region may also be pushed: the socket's consumer renders it through
the same view, as the socket's user, at the address the page last fetched it
from, and sends the rendering (render_for_socket). A burst of changes then
costs each page one message per change instead of an HTTP request, and every
page of the same version and address shares one rendering.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from urllib.parse import urlsplit

from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.urls import Resolver404, resolve
from django_htmx.middleware import HtmxDetails

from portal import live

logger = logging.getLogger(__name__)
KEEP_S = 60
# Sent with every kept rendering: a page never replaces a newer rendering of a
# region (pushed, say) with an older one that arrived late (static/js/live.js).
VERSION_HEADER = "X-Live-Version"


def shared_region(
    request, region: str, render: Callable[[], HttpResponse], *, viewer: str = "all"
) -> HttpResponse:
    """The region's response, rendered once per version, path and VIEWER."""
    version = live.region_version(region)
    if version is None:  # the cache is down: render as if nothing were kept
        return render()
    response = _kept_or_rendered(request, region, version, render, viewer)
    response[VERSION_HEADER] = str(version)
    return response


def _kept_or_rendered(request, region, version, render, viewer) -> HttpResponse:
    path = request.get_full_path()
    digest = hashlib.sha256(f"{region}|{version}|{viewer}|{path}".encode()).hexdigest()
    key = f"medbay:region:{digest}"
    try:
        kept = cache.get(key)
    except Exception:
        logger.warning("Region cache unavailable; rendering %s", region, exc_info=True)
        return render()
    if kept is not None:
        return HttpResponse(kept)
    response = render()
    if response.status_code == 200:
        try:
            cache.set(key, response.content, KEEP_S)
        except Exception:
            logger.warning("Region cache unavailable; %s not kept", region, exc_info=True)
    return response


# view -> the targets (element ids) whose renderings may be pushed to sockets.
_PUSHABLE: dict[Callable, frozenset[str]] = {}


def pushable(*targets: str) -> Callable:
    """Mark a view whose renderings of TARGETS may be pushed over a page's socket.

    Only for regions rendered through shared_region: without forms (a pushed
    rendering has no request of the page's own, hence no CSRF token of its own)
    and with the viewer's permissions applied by the view itself. Outermost
    decorator, so the mark is on what the URL resolves to.
    """

    def mark(view: Callable) -> Callable:
        _PUSHABLE[view] = frozenset(targets)
        return view

    return mark


def render_for_socket(user, url: str, target: str) -> tuple[str, int | None] | None:
    """The region at URL (for element TARGET) as USER would fetch it, and its version.

    None where it may not be pushed or did not render (not found, forbidden, an
    error): the page is then poked and fetches the region itself, which gives
    the view's own answer.
    """
    parts = urlsplit(url)
    if parts.scheme or parts.netloc or not parts.path.startswith("/"):
        return None
    try:
        match = resolve(parts.path)
    except Resolver404:
        return None
    if target not in _PUSHABLE.get(match.func, ()):
        return None
    request = _socket_request(user, parts.path, parts.query, target)
    try:
        response = match.func(request, *match.args, **match.kwargs)
    except (Http404, PermissionDenied):
        return None
    except Exception:
        logger.warning("Region %s at %s not rendered for a socket", target, url, exc_info=True)
        return None
    if response.status_code != 200 or getattr(response, "streaming", False):
        return None
    version = response.get(VERSION_HEADER)
    return response.content.decode(), int(version) if version is not None else None


def _socket_request(user, path: str, query: str, target: str) -> HttpRequest:
    """A GET of the region as the page's own htmx fetch would make it."""
    request = HttpRequest()
    request.method = "GET"
    request.path = request.path_info = path
    request.GET = QueryDict(query)
    request.META = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "SERVER_NAME": "live-socket",
        "SERVER_PORT": "0",
        "HTTP_HX_REQUEST": "true",
        "HTTP_HX_TARGET": target,
    }
    request.user = user
    request.htmx = HtmxDetails(request)
    return request
