"""The one module that sends to websockets: groups, pokes and how to send.

It knows no domain app. Each app renders and publishes its own fragments from
its own `live.py` (clusters.live, jobs.live, health.live), calling these from
`transaction.on_commit`, so a page never shows a change that was rolled back.
A message is a server-rendered HTML fragment with `hx-swap-oob`, which the
htmx ws extension swaps in by id, or a poke naming the regions that changed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.core.cache import DEFAULT_CACHE_ALIAS, cache, caches
from django.core.cache.backends.redis import RedisCache

logger = logging.getLogger(__name__)

BOARD_GROUP = "board"
JOBS_GROUP = "jobs"
EVENTS_GROUP = "events"
REMEDIATION_GROUP = "remediation"
# The board of a large cluster (clusters.canvas): compact deltas, never tiles.
FLEET_GROUP = "fleet"
# The all-clusters overview (portal.overview): pokes only.
CLUSTERS_GROUP = "clusters"
ALL_GROUPS = (
    BOARD_GROUP, JOBS_GROUP, EVENTS_GROUP, REMEDIATION_GROUP, FLEET_GROUP, CLUSTERS_GROUP
)  # fmt: skip
JOBS_REGION = "jobs"

# The in-memory layer's queues belong to the event loop the consumers run in;
# a publisher on another thread (the demo's simulator) must hand messages to
# that loop instead of creating its own.
_consumer_loop: asyncio.AbstractEventLoop | None = None


def register_consumer_loop(loop: asyncio.AbstractEventLoop) -> None:
    global _consumer_loop
    _consumer_loop = loop


def send_html(group: str, html: str) -> None:
    """Send one fragment to every socket in `group`; failures never break a caller."""
    if html:
        send_event(group, {"type": "live.html", "html": html})


def send_event(group: str, event: dict) -> None:
    """Send one channel-layer event to every socket in `group`; failures never break a caller."""
    send_events([(group, event)])


def send_events(events: list[tuple[str, dict]]) -> None:
    """Send (group, event) pairs in order, in one trip through the channel layer;
    failures never break a caller."""
    pending = getattr(_trip, "events", None)
    if pending is not None:
        pending.extend(events)
        return
    try:
        _group_send_many(events)
    except Exception:  # a dead Redis must not fail the request that changed state
        logger.warning("Live updates to %d group(s) not delivered", len(events), exc_info=True)


# What `one_trip` holds back, per thread (sync code publishes from on_commit callbacks).
_trip = threading.local()


@contextmanager
def one_trip() -> Iterator[None]:
    """Everything sent inside goes through the channel layer in one trip at the end, in
    order, each group's pokes as one naming all their regions, where the group's last
    poke was sent: a page refetches a region once and sees every change made before it.

    Each trip from a worker thread to the layer's loop costs a thread hop; a fault
    report published five (its event, the node's tile, counts, fleet, node page) and
    a decision pass five per run it started, hundreds in a storm.
    """
    if getattr(_trip, "events", None) is not None:
        yield  # nested: the outermost trip sends
        return
    _trip.events, _trip.regions, _trip.gathered = [], set(), {}
    try:
        yield
    finally:
        try:
            # Gathered publishers render now, their sends joining the trip's; one may
            # gather for another (a run's publisher pokes its jobs' pages).
            while _trip.gathered:
                publisher, items = _trip.gathered.popitem()
                _publish_gathered(publisher, list(items))
        finally:
            events, regions = _trip.events, _trip.regions
            _trip.events = _trip.regions = _trip.gathered = None
            _bump_regions(sorted(regions))
            send_events(_one_poke_per_group(events))


def gather(publisher: Callable[[list], None], items: Iterable) -> None:
    """`publisher(items)` now, or inside a trip once at its end with every item gathered
    for it: a decision pass that starts 300 runs renders their nodes' tiles in one
    query, not 300."""
    gathered = getattr(_trip, "gathered", None)
    if gathered is None:
        _publish_gathered(publisher, list(items))
        return
    gathered.setdefault(publisher, {}).update(dict.fromkeys(items))


def _publish_gathered(publisher: Callable[[list], None], items: list) -> None:
    try:
        publisher(items)
    except Exception:  # as every send here: a failed live update never fails its caller
        logger.warning("Live update by %s not published", publisher.__qualname__, exc_info=True)


def _one_poke_per_group(events: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    # A decision pass that starts 300 runs pokes the run lists' group for each: every
    # admin's socket got 300 messages, and pushed the run list 300 times.
    regions: dict[str, set[str]] = {}
    last: dict[str, int] = {}
    for index, (group, event) in enumerate(events):
        if event.get("type") == "live.poke":
            regions.setdefault(group, set()).update(event["regions"])
            last[group] = index
    merged = []
    for index, (group, event) in enumerate(events):
        if event.get("type") != "live.poke":
            merged.append((group, event))
        elif last[group] == index:
            merged.append((group, {**event, "regions": sorted(regions[group])}))
    return merged


_sending: set[asyncio.Task] = set()


def _sent(task: asyncio.Task) -> None:
    _sending.discard(task)
    if not task.cancelled() and task.exception() is not None:
        logger.warning("Live update not delivered", exc_info=task.exception())


async def _send_all(layer, events: list[tuple[str, dict]]) -> None:
    for group, message in events:
        try:
            await layer.group_send(group, message)
        except Exception:  # one group's failure must not keep the others from theirs
            logger.warning("Live update not delivered to %s", group, exc_info=True)


def _group_send_many(events: list[tuple[str, dict]]) -> None:
    """Send EVENTS (group, message) in order, in one trip through the layer's event loop:
    `async_to_sync` starts a thread per call, which for the pages of the 3,000 jobs a
    sync cycle of a large cluster changes cost more than the cycle's own work."""
    layer = get_channel_layer()
    if layer is None or not events:
        return
    if type(layer).__module__.startswith("channels_redis."):
        unwatched = _unwatched(group for group, _ in events)
        events = [(group, message) for group, message in events if group not in unwatched]
        if not events:
            return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is not None:
        # The loop keeps only a weak reference to a task: keep it until it is
        # done, or it may be collected mid-send and its error never seen.
        task = running.create_task(_send_all(layer, events))
        _sending.add(task)
        task.add_done_callback(_sent)
        return
    loop = _consumer_loop
    in_loop_thread = loop is not None and getattr(loop, "_thread_id", None) == threading.get_ident()
    if (
        isinstance(layer, InMemoryChannelLayer)
        and loop
        and loop.is_running()
        and not in_loop_thread
    ):
        asyncio.run_coroutine_threadsafe(_send_all(layer, events), loop).result(SEND_TIMEOUT_S)
        return
    if isinstance(layer, InMemoryChannelLayer):
        async_to_sync(_send_all)(layer, events)
        return
    # A process without a loop of its own (an engine worker, the sync, a request's
    # thread) sends through one kept loop: async_to_sync made a loop and a thread per
    # trip, and the Redis layer a connection per loop, a millisecond a step.
    future = asyncio.run_coroutine_threadsafe(_send_all(layer, events), _sender_loop())
    future.result(timeout=SEND_TIMEOUT_S)


SEND_TIMEOUT_S = 5
_sender: asyncio.AbstractEventLoop | None = None
_sender_lock = threading.Lock()


def _sender_loop() -> asyncio.AbstractEventLoop:
    global _sender
    with _sender_lock:
        if _sender is None or _sender.is_closed():
            _sender = asyncio.new_event_loop()
            threading.Thread(target=_sender.run_forever, name="live-sender", daemon=True).start()
        return _sender


def session_group(session_key: str) -> str:
    """The sockets one login session opened; closed when that session logs out."""
    return "session." + re.sub(r"[^A-Za-z0-9]", "_", session_key or "")[:80]


def user_group(user_pk: int) -> str:
    """The sockets of one account; closed when its roles change, rechecked when its
    password or active flag does."""
    return f"user.{int(user_pk)}"


def close_sockets(group: str, code: int) -> None:
    """Close every socket in GROUP with CODE (4401 logged out, 4403 access changed).

    The browser does not reconnect on these codes (static/js/live.js says why
    live updates stopped): the page must be reloaded, which asks again who it is.
    """
    try:
        _group_send_many([(group, {"type": "live.close", "code": code})])
    except Exception:  # the page closes anyway when it next talks to the server
        logger.warning("Could not close the sockets of %s", group, exc_info=True)


def recheck_sockets(group: str) -> None:
    """Have every socket in GROUP ask again whether its session still logs it in; those
    it no longer does close with 4401 (a new password ends the sessions made with the
    old one; a session opened since stays)."""
    try:
        _group_send_many([(group, {"type": "live.recheck"})])
    except Exception:  # each socket asks again by itself within a minute (portal.sockets)
        logger.warning("Could not have the sockets of %s rechecked", group, exc_info=True)


def poke(group: str, regions: Iterable[str]) -> None:
    """Tell the pages in GROUP that these regions changed (static/js/live.js).

    The region is rendered again through its own view, with the viewer's
    permissions and the page's filters: by the socket's consumer, which pushes
    the rendering, where the page told it the region's address and the view
    allows it (portal.regions.render_for_socket), otherwise by the page, which
    the consumer passes the poke on to and which fetches the region itself.
    Either way a page applies only what it shows, in order, and a socket never
    carries rows its user may not see.
    """
    poke_many([(group, regions)])


def poke_many(pokes: Iterable[tuple[str, Iterable[str]]]) -> None:
    """`poke` for many groups at once (the pages of every job a sync cycle changed),
    sent in one trip through the channel layer; failures never break a caller."""
    events, bumped = [], set()
    held = getattr(_trip, "regions", None)
    for group, regions in pokes:
        names = sorted(set(regions))
        if names:
            if held is not None:
                held.update(names)  # bumped once when the trip ends
            else:
                bumped.update(names)
            events.append((group, {"type": "live.poke", "regions": names}))
    _bump_regions(sorted(bumped))
    if events:
        send_events(events)


def poke_message(names: Iterable[str]) -> str:
    """What a page receives when it must fetch these regions itself."""
    return json.dumps({"poke": list(names)})


REGION_VERSION_KEY = "medbay:region-version:{}"


def _bump_regions(names: list[str]) -> None:
    """A new version of each region: renderings of the old ones are not served again.

    On Redis in one round trip: Django's `cache.incr` costs two (EXISTS, then INCR) and
    a client object, and a decision pass that starts 300 runs pokes 300 node pages.
    """
    if not names:
        return
    keys = [REGION_VERSION_KEY.format(name) for name in names]
    try:
        client = redis_client()
        if client is None:
            for key in keys:
                _bump_one(key)
            return
        with client.pipeline(transaction=False) as pipeline:
            for key in keys:
                # A key never bumped (or evicted) counts from 0, as `_bump_one`'s
                # add-then-incr; Django stores integers unpickled, so INCR reads them.
                pipeline.incr(cache.make_and_validate_key(key))
            pipeline.execute()
    except Exception:  # a cache outage must not stop the live update itself
        logger.warning("Versions of %d region(s) not bumped", len(names), exc_info=True)


def redis_client():
    """The Redis client behind Django's cache, or None for another cache backend.

    Django's RedisCache offers no pipeline, and its client is a private attribute:
    tests/portal/test_region_versions.py checks this against a real Redis.
    """
    backend = caches[DEFAULT_CACHE_ALIAS]
    if not isinstance(backend, RedisCache):
        return None
    return backend._cache.get_client(write=True)


def _bump_one(key: str) -> None:
    try:
        cache.incr(key)
    except ValueError:  # never bumped (or evicted): counted from 0
        cache.add(key, 0, None)
        cache.incr(key)


def region_version(name: str) -> int | None:
    """The region's current version; None when the cache cannot say."""
    try:
        return cache.get_or_set(REGION_VERSION_KEY.format(name), 0, None)
    except Exception:
        logger.warning("Region version of %s unknown", name, exc_info=True)
        return None


def cluster_group(group: str, cluster_id: int) -> str:
    """The sockets of the pages that show GROUP's list for one cluster only."""
    return f"{group}.{int(cluster_id)}"


def cluster_groups(group: str, cluster_ids: Iterable[int]) -> list[str]:
    """Where a change on these clusters goes: the pages that show every cluster (GROUP)
    and those that show one of them; never a page that shows another cluster."""
    return [group, *(cluster_group(group, pk) for pk in sorted(set(cluster_ids)))]


def node_page_group(name: str, cluster_id: int | None = None) -> str:
    """The sockets of one node's page: NAME on cluster CLUSTER_ID; without it, the pages
    opened by name alone, before clusters had addresses (kept for pages still open)."""
    # Channel group names allow only ASCII letters, digits, '-', '_' and '.'.
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80]
    return f"node.{int(cluster_id)}.{safe}" if cluster_id is not None else f"node.{safe}"


def poke_node_pages(names: Iterable[str], cluster_id: int | None = None) -> None:
    poke_many((node_page_group(name, cluster_id), [f"node-{name}"]) for name in sorted(set(names)))


def job_page_group(cluster_id: int, slurm_id: int) -> str:
    """The sockets of the pages that show one job (its detail page)."""
    return f"job.{int(cluster_id)}.{int(slurm_id)}"


# Which pages of one job or one node are open. A sync cycle of a large cluster changes
# thousands of jobs that nobody has open, and each send to a group costs the Redis
# layer two round trips whether or not a socket is in it (0.5 s of a 60,000-job
# cycle). A socket notes here the page groups it joins, until when (renewed with its
# groups, portal.consumers); only groups someone watches are sent to.
PAGE_GROUP_PREFIXES = ("job.", "node.")
WATCHED_KEY = "medbay:watched-page-groups"
# As long as the Redis layer keeps a socket in a group (settings, group_expiry): a
# socket renews both every 15 minutes.
WATCH_FOR_S = 3600


def _page_groups(groups: Iterable[str]) -> list[str]:
    return sorted({group for group in groups if group.startswith(PAGE_GROUP_PREFIXES)})


def note_watched(groups: Iterable[str]) -> None:
    """A socket joined GROUPS: its page groups are watched for the next hour."""
    pages = _page_groups(groups)
    if not pages:  # a board's or a list's socket: nothing to note
        return
    try:
        client = redis_client()
        if client is None:
            return
        key, now = cache.make_and_validate_key(WATCHED_KEY), time.time()
        with client.pipeline(transaction=False) as pipeline:
            pipeline.zadd(key, dict.fromkeys(pages, now + WATCH_FOR_S))
            pipeline.zremrangebyscore(key, "-inf", now)  # lapsed: their sockets are gone
            pipeline.execute()
    except Exception:  # noted again when the socket next renews its groups
        logger.warning("Watched page groups not noted", exc_info=True)


def _unwatched(groups: Iterable[str]) -> set[str]:
    """The page groups among GROUPS that no socket watches, in one round trip; none
    where that cannot be known (another cache, Redis away): a send too many costs
    little, a page left stale costs its reader."""
    pages = _page_groups(groups)
    if not pages:
        return set()
    try:
        client = redis_client()
        if client is None:
            return set()
        key = cache.make_and_validate_key(WATCHED_KEY)
        # ZSCOREs in a pipeline, not ZMSCORE: that needs Redis 6.2, and Debian 11 and
        # Ubuntu 22.04 ship 6.0.
        with client.pipeline(transaction=False) as pipeline:
            for group in pages:
                pipeline.zscore(key, group)
            until = pipeline.execute()
    except Exception:
        logger.warning("Watched page groups unknown; sending to all", exc_info=True)
        return set()
    now = time.time()
    return {group for group, watched in zip(pages, until, strict=True) if (watched or 0) < now}
