"""Counters several processes add to and the metrics page reads: kept in the Django
cache (Redis in production, shared by every process), so that what the sync, the
engine and each web process count is one figure at `/metrics`. A cache that is down
loses counts; it never fails the caller."""

from __future__ import annotations

import logging

from django.core.cache import cache

logger = logging.getLogger(__name__)

KEY = "medbay:counter:{name}"


def incr(key: str, delta: int = 1) -> None:
    """Add DELTA to the cache's KEY, creating it at 0 on first use; raises what the cache
    raises."""
    try:
        cache.incr(key, delta)
    except ValueError:
        # First use: add() is atomic, so of two racing processes one creates the
        # key and both increments land.
        cache.add(key, 0, timeout=None)
        cache.incr(key, delta)


def add(name: str, delta: int = 1) -> None:
    try:
        incr(KEY.format(name=name), delta)
    except Exception:  # the cache is down: a lost count, never a failed caller
        logger.warning("Counter %s not counted: no cache", name, exc_info=True)


def read(name: str) -> int | None:
    """The count so far, 0 when never counted; None when the cache cannot be read."""
    try:
        return int(cache.get(KEY.format(name=name)) or 0)
    except Exception:
        logger.warning("Counter %s not read: no cache", name, exc_info=True)
        return None
