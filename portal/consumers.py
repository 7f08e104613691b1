"""The live-update websocket: authenticate, check the role, forward fragments."""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from portal import live
from portal.roles import ANY_ROLE, has_role


def _requested_topics(query_string: bytes) -> tuple[str, ...]:
    topics = parse_qs(query_string.decode("latin-1")).get("topics", ["board"])[0].split(",")
    return tuple(topic for topic in topics if topic in live.ALL_GROUPS) or (live.BOARD_GROUP,)


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
        self.groups_joined = _requested_topics(self.scope.get("query_string", b""))
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
