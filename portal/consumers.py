"""The live-update websocket: authenticate, check the role, forward fragments, push regions."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.db import DatabaseError

from core import live
from core.roles import roles_of
from portal import sockets
from portal.regions import render_for_socket

logger = logging.getLogger(__name__)

# Close codes. A server may send only 1000 or 3000-4999 (daphne refuses the
# standard 1012/1013), so Medbay's "restarting" and "try again later" are 4012
# and 4013, which static/js/live.js reconnects after; 4401 (logged out) and
# 4403 (no role, or roles changed) it does not. 4429: its person has
# MEDBAY_SOCKETS_PER_USER sockets open already; the page polls instead, and
# tries again now and then.
CLOSE_FORBIDDEN = 4403
CLOSE_RESTARTING = 4012
CLOSE_TRY_AGAIN = 4013
CLOSE_TOO_MANY = 4429


# A cluster's name as Slurm spells its ClusterName (clusters.config.CLUSTER_NAME).
_CLUSTER = r"[a-z0-9][a-z0-9_-]{0,63}"
# One job's page: `job:<cluster>:<slurm id>` (`job:<slurm id>` from pages opened before
# jobs had cluster addresses), joined only by those who may see that job.
JOB_TOPIC = re.compile(rf"job:(?:({_CLUSTER}):)?(\d{{1,18}})")
# One node's page: `node:<cluster>:<name>` (or `node:<name>`, as above).
NODE_TOPIC = re.compile(rf"node:(?:({_CLUSTER}):)?([A-Za-z0-9._-]{{1,64}})")
# A list that shows one cluster: `board:<cluster>`; plain `board` shows them all.
CLUSTER_LIST_TOPIC = re.compile(rf"({'|'.join(live.ALL_GROUPS)}):({_CLUSTER})")


def _requested_topics(query_string: bytes) -> tuple[str, ...]:
    topics = parse_qs(query_string.decode("latin-1")).get("topics", ["board"])[0].split(",")
    patterns = (JOB_TOPIC, NODE_TOPIC, CLUSTER_LIST_TOPIC)
    wanted = tuple(
        t for t in topics if t in live.ALL_GROUPS or any(p.fullmatch(t) for p in patterns)
    )
    return wanted or (live.BOARD_GROUP,)


def groups_for(user, topics: tuple[str, ...]) -> tuple[str, ...]:
    """The groups USER may join for TOPICS; () when USER has no role.

    One synchronous call per connect: a thousand boards reconnecting at once
    otherwise queue three database round trips each on the one thread that
    channels runs database work on. The lists' sockets carry only pokes, never
    rows (the page fetches its rows through its view), so everyone with a role
    may join them; one job's page only those who may see that job. A topic that
    names a cluster Medbay does not watch joins nothing.
    """
    if not roles_of(user):
        return ()
    from clusters.models import Cluster

    named = {m[1] for t in topics for m in [_cluster_of(t)] if m and m[1]}
    ids = dict(Cluster.objects.filter(name__in=named).values_list("name", "pk")) if named else {}
    groups = []
    for topic in topics:
        job_topic, node_topic = JOB_TOPIC.fullmatch(topic), NODE_TOPIC.fullmatch(topic)
        list_topic = CLUSTER_LIST_TOPIC.fullmatch(topic)
        if job_topic:
            cluster = job_topic.group(1)
            if cluster is None or cluster in ids:
                groups += _job_page_groups(user, int(job_topic.group(2)), ids.get(cluster))
        elif node_topic:
            cluster, name = node_topic.group(1), node_topic.group(2)
            if cluster is None or cluster in ids:
                groups.append(live.node_page_group(name, ids.get(cluster)))
        elif list_topic:
            if list_topic.group(2) in ids:
                groups.append(live.cluster_group(list_topic.group(1), ids[list_topic.group(2)]))
        else:
            groups.append(topic)
    return tuple(groups)


def _cluster_of(topic: str):
    for pattern in (JOB_TOPIC, NODE_TOPIC):
        found = pattern.fullmatch(topic)
        if found:
            return found
    found = CLUSTER_LIST_TOPIC.fullmatch(topic)
    return (found.group(0), found.group(2)) if found else None


def _job_page_groups(user, slurm_id: int, cluster_id: int | None) -> list[str]:
    from django.http import Http404

    from jobs.queries import job_for

    try:
        # The job page's own rule for who may see it.
        job = job_for(user, slurm_id, cluster_id=cluster_id)
    except Http404:
        return []
    return [live.job_page_group(job.cluster_id, slurm_id)]


CLOSE_LOGGED_OUT = 4401

# What a page may tell its socket: the regions it shows and the address each
# last fetched itself from, {"watch": [[region, url, element id], ...]}, at most
# MEDBAY_WATCHES_PER_SOCKET of them.
# The Redis layer keeps a socket in its groups for its group expiry only (an hour, see
# settings), so that the sockets of a process stopped or killed without leaving its
# groups are forgotten instead of each send going to them for a day (13 ms a send after
# a few restarts with a thousand boards open); an open socket renews its own meanwhile.
GROUP_RENEW_S = 15 * 60
# A push is rendered as the socket's user only while its session still logs that user
# in: asked again when the last answer is older than this (and every minute anyway).
SESSION_RECHECK_S = 5
WATCH_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,80}")
MAX_URL = 2048


def parse_watch(text: str | None) -> dict[str, tuple[str, str]] | None:
    """region -> (url, element id) from a page's watch message; None if it is not one."""
    try:
        message = json.loads(text or "")
    except ValueError:
        return None
    entries = message.get("watch") if isinstance(message, dict) else None
    if not isinstance(entries, list) or len(entries) > settings.MEDBAY_WATCHES_PER_SOCKET:
        return None
    watched = {}
    for entry in entries:
        if not (isinstance(entry, list) and len(entry) == 3):
            return None
        name, url, target = entry
        if not all(isinstance(value, str) for value in entry):
            return None
        if not (WATCH_NAME.fullmatch(name) and WATCH_NAME.fullmatch(target)):
            return None
        if not url.startswith("/") or url.startswith("//") or len(url) > MAX_URL:
            return None
        watched[name] = (url, target)
    return watched


class LiveConsumer(AsyncWebsocketConsumer):
    groups_joined: tuple[str, ...] = ()
    accepted = False
    seated = False
    session_key = ""
    logged_in_at = 0.0  # monotonic: when the session last still logged its user in

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.watched: dict[str, tuple[str, str]] = {}
        self.dirty: set[str] = set()
        self.pusher: asyncio.Task | None = None
        self.renewer: asyncio.Task | None = None
        self.keeper: asyncio.Task | None = None

    async def __call__(self, scope, receive, send) -> None:
        """A live channel that fails (Redis down, say) closes the socket with "try
        again later", which the browser retries; never an HTTP 500 on the handshake."""
        try:
            await super().__call__(scope, receive, send)
        except Exception:
            logger.warning("Live socket closed: the live channel failed", exc_info=True)
            try:
                if not self.accepted:
                    await send({"type": "websocket.accept"})
                await send({"type": "websocket.close", "code": CLOSE_TRY_AGAIN})
            except Exception:  # the browser is gone already
                logger.debug("Could not close the live socket", exc_info=True)

    async def accept(self, subprotocol=None, headers=None) -> None:
        await super().accept(subprotocol, headers)
        self.accepted = True

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        # Before any database work: a flood of one person's sockets costs one Redis trip each.
        self.seated = await _off_loop(sockets.take_seat)(user.pk, self.channel_name)
        if not self.seated:
            # Accepted first: a close code reaches the browser only on an open socket.
            await self.accept()
            await self.close(code=CLOSE_TOO_MANY)
            return
        self.session_key = getattr(self.scope.get("session"), "session_key", None) or ""
        self.logged_in_at = time.monotonic()  # the handshake's own authentication
        refusal = await self._join(user)
        if refusal is not None:
            await self._give_up_seat()
            if refusal == CLOSE_TRY_AGAIN:
                await self.accept()  # so that the browser sees the code, and retries
            await self.close(code=refusal)
            return
        self.renewer = asyncio.create_task(self._renew_groups())
        self.keeper = asyncio.create_task(self._keep_seat())
        await self.accept()

    async def _join(self, user) -> int | None:
        """Join the groups USER may join for the topics asked; the close code if none."""
        topics = _requested_topics(self.scope.get("query_string", b""))
        try:
            groups = await database_sync_to_async(groups_for)(user, topics)
        except DatabaseError:
            logger.warning("Live socket refused: database unavailable", exc_info=True)
            return CLOSE_TRY_AGAIN
        if not groups:
            return CLOSE_FORBIDDEN
        live.register_consumer_loop(asyncio.get_running_loop())
        # Logging out, losing a role or the session closes the socket (portal.signals).
        groups += (live.user_group(user.pk),)
        if self.session_key:
            groups += (live.session_group(self.session_key),)
        self.groups_joined = groups
        try:
            await sockets.join(self.channel_layer, groups, self.channel_name)
        except Exception:  # closed with 4013 (__call__), and the page retries: seat-free
            await self._give_up_seat()
            raise
        await sync_to_async(live.note_watched, thread_sensitive=False)(groups)
        return None

    async def _renew_groups(self) -> None:
        while True:
            await asyncio.sleep(GROUP_RENEW_S)
            try:
                await sockets.join(self.channel_layer, self.groups_joined, self.channel_name)
                await sync_to_async(live.note_watched, thread_sensitive=False)(self.groups_joined)
            except Exception:  # Redis away: tried again next time, the socket stays open
                logger.warning("Live socket's groups not renewed", exc_info=True)

    async def _keep_seat(self) -> None:
        """Renew the seat, and close the socket once its session no longer logs it in (a
        session flushed or expired where no signal said so, portal.signals)."""
        while True:
            await asyncio.sleep(sockets.SEAT_RENEW_S)
            try:
                await _off_loop(sockets.renew_seat)(self.scope["user"].pk, self.channel_name)
            except Exception:  # Redis away: renewed next time; a lapsed seat costs nothing
                logger.warning("Live socket's seat not renewed", exc_info=True)
            await self._close_unless_logged_in(SESSION_RECHECK_S)

    async def _close_unless_logged_in(self, within_s: float) -> bool:
        """True while the socket's session still logs its user in (as of WITHIN_S ago);
        otherwise closes the socket, which must not push another rendering."""
        if not self.session_key or time.monotonic() - self.logged_in_at < within_s:
            return True  # no session: channels' own test scopes, never a browser's
        try:
            still = await _rendering(sockets.still_logged_in)(
                self.session_key, self.scope["user"].pk
            )
        except Exception:  # the database is away: the page retries, and its handshake asks
            logger.warning("Live socket's session not rechecked", exc_info=True)
            await self.close(code=CLOSE_TRY_AGAIN)
            return False
        if still:
            self.logged_in_at = time.monotonic()
            return True
        self.watched, self.dirty = {}, set()
        await self.close(code=CLOSE_LOGGED_OUT)
        return False

    async def disconnect(self, code: int) -> None:
        for task in (self.renewer, self.keeper, self.pusher):
            if task is not None:
                task.cancel()
        try:
            await sockets.leave(self.channel_layer, self.groups_joined, self.channel_name)
        finally:
            await self._give_up_seat()

    async def _give_up_seat(self) -> None:
        if self.seated:
            self.seated = False
            await _off_loop(sockets.give_up_seat)(self.scope["user"].pk, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None) -> None:
        # A page says only which regions it shows, and where from; anything else
        # is ignored. What may be pushed is the view's to say, rendered as this
        # socket's user (portal.regions.render_for_socket).
        watched = parse_watch(text_data)
        if watched is not None:
            self.watched = watched

    async def live_html(self, event: dict) -> None:
        await self.send(text_data=event["html"])

    async def live_poke(self, event: dict) -> None:
        names = [name for name in event.get("regions", ()) if isinstance(name, str)]
        fetched = [name for name in names if name not in self.watched]
        if fetched:
            await self.send(text_data=live.poke_message(fetched))
        pushed = [name for name in names if name in self.watched]
        if pushed:
            # One rendering in flight per socket; changes that arrive meanwhile
            # are pushed together afterwards, as their newest version.
            self.dirty.update(pushed)
            if self.pusher is None or self.pusher.done():
                self.pusher = asyncio.create_task(self._push_dirty())

    async def _push_dirty(self) -> None:
        render = _rendering(render_for_socket)
        while self.dirty:
            if not await self._close_unless_logged_in(SESSION_RECHECK_S):
                return
            name = self.dirty.pop()
            if name not in self.watched:
                continue
            url, target = self.watched[name]
            try:
                rendered = await render(self.scope["user"], url, target)
            except Exception:  # the page fetches the region itself, and sees the error
                logger.warning("Live region %s not rendered for a socket", name, exc_info=True)
                rendered = None
            if rendered is None:
                await self.send(text_data=live.poke_message([name]))
                continue
            html, version = rendered
            message = {"push": name, "url": url, "version": version, "html": html}
            await self.send(text_data=json.dumps(message))

    async def live_close(self, event: dict) -> None:
        await self.close(code=int(event.get("code", CLOSE_LOGGED_OUT)))

    async def live_recheck(self, event: dict) -> None:
        # The account's password or active flag changed (portal.signals).
        await self._close_unless_logged_in(0)


def _off_loop(function):
    """FUNCTION (Redis, no database) on a worker thread, never on the database's."""
    return sync_to_async(function, thread_sensitive=False)


def _rendering(function):
    """FUNCTION on the render pool: never on the thread a handshake's queries wait for."""
    return sockets.on_render_pool(function)
