"""One render of a live region for all who see it alike.

When a list changes, every open page showing it is poked and fetches its rows
again: a hundred admins on the event feed would render the same rows a
hundred times. A region's rendering is kept under its live version (bumped by
each poke, core.live), the request's path and query, and who is looking —
everyone alike, or one user where rows depend on the viewer (a researcher's
queue under PrivateData) — so the next viewer of the same version gets it
ready-made. Only regions without forms are kept: a CSRF token is one user's.

Such a region may also be pushed: the socket's consumer renders it through
the same view, as the socket's user, at the address the page last fetched it
from, and sends the rendering (render_for_socket). A burst of changes then
costs each page one message per change instead of an HTTP request, and every
page of the same version and address shares one rendering.

A pushed region is rendered at its address less the parameters its view never asks
for (`_own_parameters`): an address made unique by a junk parameter
(`/jobs/?sort=gpu_hours&z=<uuid>`) would otherwise cost a rendering of its own for
every socket that watches it, at every change.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from urllib.parse import unquote_plus, urlsplit

from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.urls import Resolver404, resolve
from django_htmx.middleware import HtmxDetails

from core import live

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
    view = (match.func, target)
    known = _ASKED.get(view, WHOLE)
    query = _own_parameters(parts.query, known)
    request = _socket_request(user, parts.path, query, target)
    try:
        response = match.func(request, *match.args, **match.kwargs)
    except (Http404, PermissionDenied):
        return None
    except Exception:
        logger.warning("Region %s at %s not rendered for a socket", target, url, exc_info=True)
        return None
    asked = request.GET.asked
    _ASKED[view] = _learned(_ASKED.get(view, frozenset()), asked)
    if query != parts.query and (asked is WHOLE or _dropped(parts.query, asked - known)):
        return None  # rendered without a parameter it does ask for: the page fetches itself
    if response.status_code != 200 or getattr(response, "streaming", False):
        return None
    version = response.get(VERSION_HEADER)
    return response.content.decode(), int(version) if version is not None else None


# (view, target) -> the names of the parameters the view asked for when it rendered
# that target for a socket, or WHOLE where it read the query whole (its names, a copy,
# a URL of it) or has not rendered it yet: such addresses are rendered as they are.
# Learned from the view itself rather than listed beside it, so that a filter added to
# a view is never dropped from its pushes.
_ASKED: dict[tuple[Callable, str], frozenset[str] | object] = {}
WHOLE = object()


def _learned(before, asked):
    return WHOLE if WHOLE in (before, asked) else before | asked


def _own_parameters(query: str, names) -> str:
    """QUERY less the parameters not in NAMES, the rest byte for byte as they were: the
    rendering is then kept under the key of the page's own fetch of that address."""
    if names is WHOLE:
        return query
    return "&".join(pair for pair in query.split("&") if _name(pair) in names)


def _dropped(query: str, names) -> bool:
    return any(_name(pair) in names for pair in query.split("&"))


def _name(pair: str) -> str:
    return unquote_plus(pair.partition("=")[0])


class _NotingQuery(QueryDict):
    """request.GET that notes the names of the parameters a view asks for."""

    def __init__(self, query: str) -> None:
        self.asked: frozenset[str] | object = WHOLE  # QueryDict's own filling is no asking
        super().__init__(query)
        self.asked = frozenset()

    def _note(self, key) -> None:
        if self.asked is not WHOLE:
            self.asked = self.asked | {key}

    def __getitem__(self, key):
        self._note(key)
        return super().__getitem__(key)

    def __contains__(self, key) -> bool:
        self._note(key)
        return super().__contains__(key)

    def get(self, key, default=None):
        self._note(key)
        return super().get(key, default)

    def getlist(self, key, default=None):
        self._note(key)
        return super().getlist(key, default)


def _reads_the_whole_query(method: str) -> Callable:
    inherited = getattr(QueryDict, method)

    def whole(self, *args, **kwargs):
        self.asked = WHOLE
        return inherited(self, *args, **kwargs)

    return whole


# Whatever reads more than one named parameter: any of these makes every parameter
# the view's own (`if request.GET:` included, which a junk parameter would change).
for _method in (
    "__iter__", "__len__", "__eq__", "__copy__", "__deepcopy__", "__repr__",
    "keys", "values", "items", "lists", "dict", "copy", "urlencode",
):  # fmt: skip
    setattr(_NotingQuery, _method, _reads_the_whole_query(_method))


def _socket_request(user, path: str, query: str, target: str) -> HttpRequest:
    """A GET of the region as the page's own htmx fetch would make it."""
    request = HttpRequest()
    request.method = "GET"
    request.path = request.path_info = path
    request.GET = _NotingQuery(query)
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
