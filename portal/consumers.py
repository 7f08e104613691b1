"""The live-update websocket: authenticate, check the role, forward fragments."""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from portal import live
from portal.roles import ANY_ROLE, Role, has_role


def _requested_topics(query_string: bytes) -> tuple[str, ...]:
    topics = parse_qs(query_string.decode("latin-1")).get("topics", ["board"])[0].split(",")
    return tuple(topic for topic in topics if topic in live.ALL_GROUPS) or (live.BOARD_GROUP,)


def _groups_for(user, topics: tuple[str, ...]) -> tuple[str, ...]:
    """Researchers get only their own jobs' rows; admins and managers get all."""
    from jobs.accounts import unix_user_for
    from jobs.live import user_jobs_group

    groups = []
    for topic in topics:
        if topic == live.JOBS_GROUP and not has_role(user, Role.ADMIN, Role.MANAGER):
            groups.append(user_jobs_group(unix_user_for(user)))
        else:
            groups.append(topic)
    return tuple(groups)


class LiveConsumer(AsyncWebsocketConsumer):
    groups_joined: tuple[str, ...] = ()

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        if not await database_sync_to_async(has_role)(user, *ANY_ROLE):
            await self.close(code=4403)
            return
        live.register_consumer_loop(asyncio.get_running_loop())
        topics = _requested_topics(self.scope.get("query_string", b""))
        self.groups_joined = await database_sync_to_async(_groups_for)(user, topics)
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        for group in self.groups_joined:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None) -> None:
        # The page only listens; anything a client sends is ignored.
        return

    async def live_html(self, event: dict) -> None:
        await self.send(text_data=event["html"])
