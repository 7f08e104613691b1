"""What one live socket may cost, and how long it stays open (portal.consumers).

One researcher opened 120 sockets, each watching 16 regions at addresses made
unique by a junk parameter: every change then cost the portal a rendering per
socket and region, all of them on the one thread channels gives database work,
and another person's handshake waited 4-5 s behind them. So:

- a person holds at most MEDBAY_SOCKETS_PER_USER sockets, on all processes
  together (`take_seat`); the next is closed with 4429 and its page polls;
- pushed regions render on MEDBAY_RENDERS_IN_FLIGHT threads of their own
  (`render_pool`), never on the thread a handshake waits for;
- joining and leaving groups waits for one of LAYER_OPS_IN_FLIGHT slots per
  process (`join`, `leave`), so a burst of sockets closing at once never asks
  the Redis layer for more connections than its pool holds;
- a socket lives only as long as its session (`still_logged_in`), asked before
  a push and every SEAT_RENEW_S.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from importlib import import_module

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, load_backend
from django.core.cache import cache
from django.db import close_old_connections
from django.utils.crypto import constant_time_compare

from core import live

logger = logging.getLogger(__name__)

# A person's open sockets, on every process: a sorted set of channel names per person,
# scored by when each seat lapses. A socket renews its seat every SEAT_RENEW_S, so the
# seats of a process killed without closing its sockets lapse within minutes instead of
# keeping their person from opening new ones.
SEATS_KEY = "medbay:socket-seats:{}"
SEAT_RENEW_S = 60
SEAT_FOR_S = 3 * SEAT_RENEW_S
_local_seats = threading.Lock()


def take_seat(user_pk: int, channel: str) -> bool:
    """CHANNEL takes one of its person's MEDBAY_SOCKETS_PER_USER seats; False when all
    are taken. A Redis that cannot say admits the socket: its groups fail next."""
    cap = settings.MEDBAY_SOCKETS_PER_USER
    key, now = SEATS_KEY.format(int(user_pk)), time.time()
    try:
        client = live.redis_client()
        if client is None:
            return _take_local_seat(key, channel, cap, now)
        key = cache.make_and_validate_key(key)
        # One transaction: of two sockets racing for the last seat, one counts the other.
        with client.pipeline(transaction=True) as pipeline:
            pipeline.zremrangebyscore(key, "-inf", now)
            pipeline.zadd(key, {channel: now + SEAT_FOR_S})
            pipeline.zcard(key)
            pipeline.expire(key, SEAT_FOR_S)
            held = pipeline.execute()[2]
        if held <= cap:
            return True
        client.zrem(key, channel)
        return False
    except Exception:
        logger.warning("Live socket seats unknown; admitting the socket", exc_info=True)
        return True


def _take_local_seat(key: str, channel: str, cap: int, now: float) -> bool:
    # Without Redis the in-memory channel layer serves one process: its cache counts.
    with _local_seats:
        held = {name: until for name, until in (cache.get(key) or {}).items() if until > now}
        if len(held) >= cap:
            return False
        held[channel] = now + SEAT_FOR_S
        cache.set(key, held, SEAT_FOR_S)
        return True


def renew_seat(user_pk: int, channel: str) -> None:
    _set_seat(user_pk, channel, time.time() + SEAT_FOR_S)


def give_up_seat(user_pk: int, channel: str) -> None:
    _set_seat(user_pk, channel, None)


def _set_seat(user_pk: int, channel: str, until: float | None) -> None:
    key = SEATS_KEY.format(int(user_pk))
    client = live.redis_client()
    if client is None:
        with _local_seats:
            held = cache.get(key) or {}
            held.pop(channel, None)
            if until is not None:
                held[channel] = until
            cache.set(key, held, SEAT_FOR_S)
        return
    key = cache.make_and_validate_key(key)
    with client.pipeline(transaction=False) as pipeline:
        if until is None:
            pipeline.zrem(key, channel)
        else:
            pipeline.zadd(key, {channel: until})
            pipeline.expire(key, SEAT_FOR_S)
        pipeline.execute()


_pool: tuple[int, ThreadPoolExecutor] | None = None
_pool_lock = threading.Lock()


def render_pool() -> ThreadPoolExecutor:
    """The threads that render pushed regions and check sessions: at most
    MEDBAY_RENDERS_IN_FLIGHT at once, while the rest wait their turn in its queue."""
    global _pool
    size = settings.MEDBAY_RENDERS_IN_FLIGHT
    with _pool_lock:
        if _pool is None or _pool[0] != size:  # tests change the setting
            if _pool is not None:
                _pool[1].shutdown(wait=False)
            _pool = (size, ThreadPoolExecutor(size, thread_name_prefix="live-render"))
        return _pool[1]


def on_render_pool(function):
    """FUNCTION as a coroutine function that runs on the render pool, each call between
    two closes of the thread's obsolete database connections, as channels'
    database_sync_to_async does: its test communicator turns channels' own closes into
    no-ops, and a pool thread then held its connection past the test database's end."""

    def call(*args, **kwargs):
        close_old_connections()
        try:
            return function(*args, **kwargs)
        finally:
            close_old_connections()

    return sync_to_async(call, thread_sensitive=False, executor=render_pool())


# channels_redis gives each event loop a pool of at most 100 connections and raises
# MaxConnectionsError past it rather than waiting: 150 sockets closed at once, each
# leaving its groups, failed 52 times. The socket's receive and the sends need theirs.
LAYER_OPS_IN_FLIGHT = 32
_layer_slots: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _slots() -> asyncio.Semaphore:
    # One per event loop: a semaphore belongs to the loop that first waits on it.
    loop = asyncio.get_running_loop()
    slots = _layer_slots.get(loop)
    if slots is None:
        slots = _layer_slots[loop] = asyncio.Semaphore(LAYER_OPS_IN_FLIGHT)
    return slots


async def join(layer, groups, channel: str) -> None:
    for group in groups:
        async with _slots():
            await layer.group_add(group, channel)


async def leave(layer, groups, channel: str) -> None:
    for group in groups:
        async with _slots():
            await layer.group_discard(group, channel)


def still_logged_in(session_key: str, user_pk) -> bool:
    """Whether the session SESSION_KEY still logs in user USER_PK: not flushed or
    expired, the account active, its password the one the session was made with.

    Django's own test on every request (django.contrib.auth.get_user), without its
    side effects: that flushes a session it refuses and renews one made with a
    SECRET_KEY_FALLBACKS key, which a check from a socket must not do behind the
    browser's back.
    """
    session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    try:
        if str(session[SESSION_KEY]) != str(user_pk):
            return False
        backend_path = session[BACKEND_SESSION_KEY]
    except KeyError:  # flushed, expired or never logged in
        return False
    if backend_path not in settings.AUTHENTICATION_BACKENDS:
        return False
    user = load_backend(backend_path).get_user(user_pk)  # None once disabled
    if user is None:
        return False
    made_with = session.get(HASH_SESSION_KEY) or ""
    hashes = (user.get_session_auth_hash(), *user.get_session_auth_fallback_hash())
    return bool(made_with) and any(constant_time_compare(made_with, h) for h in hashes)
