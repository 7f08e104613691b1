"""One render of a live region for all who see it alike.

When a list changes, every open page showing it is poked and fetches its rows
again: a hundred admins on the event feed would render the same rows a
hundred times. A region's rendering is kept under its live version (bumped by
each poke, portal.live), the request's path and query, and who is looking —
everyone alike, or one user where rows depend on the viewer (a researcher's
queue under PrivateData) — so the next viewer of the same version gets it
ready-made. Only regions without forms are kept: a CSRF token is one user's.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable

from django.core.cache import cache
from django.http import HttpResponse

from portal import live

logger = logging.getLogger(__name__)
KEEP_S = 60


def shared_region(
    request, region: str, render: Callable[[], HttpResponse], *, viewer: str = "all"
) -> HttpResponse:
    """The region's response, rendered once per version, path and VIEWER."""
    version = live.region_version(region)
    if version is None:  # the cache is down: render as if nothing were kept
        return render()
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
