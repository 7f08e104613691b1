"""Login throttling: too many failed log-ins for one user name from one address.

Counters live in the Django cache (Redis when REDIS_URL is set), so every
portal process and host behind the load balancer shares them. The window is
fixed from the first failure: the cache expires the counter, and an increment
keeps the expiry, so a steady trickle of guesses cannot keep extending it.

If the cache is unreachable (Redis down), throttling fails open: log-ins keep
working unthrottled, with a warning, rather than every log-in failing with a 500
(found by tests/chaos/test_redis_outage.py).
"""

from __future__ import annotations

import hashlib
import logging

from django.conf import settings
from django.core.cache import cache

logger = logging.getLogger(__name__)


def client_ip(request) -> str:
    # daphne's --proxy-headers puts the load balancer's X-Forwarded-For here;
    # reading the header ourselves would let any client pick its own address.
    return request.META.get("REMOTE_ADDR", "")


def _key(ip: str, username: str) -> str:
    # Hashed: user names may hold characters some cache backends refuse in keys.
    digest = hashlib.sha256(f"{ip}\n{username.strip().lower()}".encode()).hexdigest()
    return f"medbay:login-failures:{digest[:40]}"


def failures(ip: str, username: str) -> int:
    try:
        return cache.get(_key(ip, username), 0)
    except Exception:  # any backend's connection error: see the module docstring
        logger.warning("Log-in throttling unavailable: the cache is unreachable", exc_info=True)
        return 0


def is_locked(ip: str, username: str) -> bool:
    return failures(ip, username) >= settings.MEDBAY_LOGIN_MAX_FAILURES


def record_failure(ip: str, username: str) -> int:
    """Count one failed log-in; returns the failures so far in this window (0: no cache)."""
    try:
        count = _count_failure(_key(ip, username))
    except Exception:  # any backend's connection error: see the module docstring
        logger.warning("Failed log-in not counted: the cache is unreachable", exc_info=True)
        return 0
    if count == settings.MEDBAY_LOGIN_MAX_FAILURES:
        logger.warning(
            "Log-in locked for user name %r from %s after %d failures", username, ip, count
        )
    return count


def _count_failure(key: str) -> int:
    cache.add(key, 0, timeout=settings.MEDBAY_LOGIN_WINDOW_S)
    try:
        return cache.incr(key)
    except ValueError:  # expired between add() and incr(): this failure opens a new window
        cache.add(key, 1, timeout=settings.MEDBAY_LOGIN_WINDOW_S)
        return 1


def clear(ip: str, username: str) -> None:
    try:
        cache.delete(_key(ip, username))
    except Exception:  # any backend's connection error: see the module docstring
        logger.warning("Log-in failures not cleared: the cache is unreachable", exc_info=True)


def lockout_message() -> str:
    minutes = max(1, round(settings.MEDBAY_LOGIN_WINDOW_S / 60))
    return (
        f"Too many failed log-in attempts for this user name from your address. "
        f"Try again in {minutes} minute{'s' if minutes != 1 else ''}."
    )
