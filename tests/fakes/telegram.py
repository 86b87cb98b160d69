"""A fake Telegram Bot API on 127.0.0.1 that python-telegram-bot talks to over HTTP.

Routes ``/bot{token}/{method}``: requests arrive form-encoded (every value a string, objects as
JSON), answers are ``{"ok": true, "result": ...}``. Every call is recorded. ``fail_next``
injects errors; ``updates`` feeds ``getUpdates`` (bounded long poll) for polling mode. As the
real Bot API, getUpdates keeps returning an update until a later call confirms it with an
``offset`` above its ``update_id``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from gateway.testing.loopback import LoopbackServer

TOKEN = "123456:TEST-token"
SECRET = "webhook-s3cret_value"
BOT_ID = 7000000001
BOT_USERNAME = "gateway_test_bot"


@dataclass
class Call:
    """One Bot API call the fake received."""

    method: str
    params: dict[str, Any]
    content_type: str


class FakeTelegram:
    """The fake server. ``base_url`` is what python-telegram-bot's ``base_url`` should be."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.calls: list[Call] = []
        self.fail_next: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        self.updates: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.sent = asyncio.Condition()
        self._message_ids = itertools.count(5000)
        self._server = LoopbackServer()
        self.base_url = ""
        self.polls = 0  # getUpdates calls answered
        self.unconfirmed: list[dict[str, Any]] = []  # handed out, not yet confirmed
        self.confirmed_below = 0  # the highest offset a getUpdates call sent
        self.polling_now = 0  # getUpdates calls in flight
        self.most_concurrent_polls = 0

    def calls_to(self, method: str) -> list[Call]:
        """The recorded calls of one method, in order."""
        return [call for call in self.calls if call.method == method]

    def texts(self) -> list[str]:
        """Every text sent with sendMessage, in order."""
        return [call.params["text"] for call in self.calls_to("sendMessage")]

    async def wait_for_messages(self, count: int, timeout: float = 5.0) -> list[Call]:
        """Wait until ``count`` sendMessage calls arrived (bounded)."""
        async with self.sent:
            await asyncio.wait_for(
                self.sent.wait_for(lambda: len(self.calls_to("sendMessage")) >= count), timeout)
        return self.calls_to("sendMessage")

    async def _handle(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return web.json_response({"ok": False, "error_code": 401,
                                      "description": "Unauthorized"}, status=401)
        method = request.match_info["method"]
        content_type = request.content_type
        if content_type == "application/json":
            params = await request.json()
        else:
            params = dict(await request.post())
        call = Call(method, params, content_type)
        if method != "getUpdates":
            self.calls.append(call)
        failures = self.fail_next.get(method)
        if failures:
            status, body = failures.pop(0)
            return web.json_response(body, status=status)
        answer = await getattr(self, f"_{method}", self._unknown)(params)
        if method == "sendMessage":
            async with self.sent:
                self.sent.notify_all()
        return answer

    @staticmethod
    def _ok(result: Any) -> web.Response:
        return web.json_response({"ok": True, "result": result})

    async def _unknown(self, params: dict[str, Any]) -> web.Response:
        return web.json_response({"ok": False, "error_code": 404,
                                  "description": "Not Found: method not found"}, status=404)

    async def _getMe(self, params: dict[str, Any]) -> web.Response:
        return self._ok({"id": BOT_ID, "is_bot": True, "first_name": "Gateway Test",
                         "username": BOT_USERNAME, "can_join_groups": True,
                         "can_read_all_group_messages": False,
                         "supports_inline_queries": False})

    async def _sendMessage(self, params: dict[str, Any]) -> web.Response:
        chat_id = int(params["chat_id"])
        message: dict[str, Any] = {
            "message_id": next(self._message_ids), "date": 1767225700,
            "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"},
            "from": {"id": BOT_ID, "is_bot": True, "first_name": "Gateway Test",
                     "username": BOT_USERNAME},
            "text": params["text"],
        }
        if "message_thread_id" in params:
            message["message_thread_id"] = int(params["message_thread_id"])
            message["is_topic_message"] = True
        return self._ok(message)

    async def _sendChatAction(self, params: dict[str, Any]) -> web.Response:
        return self._ok(True)

    async def _setWebhook(self, params: dict[str, Any]) -> web.Response:
        return self._ok(True)

    async def _deleteWebhook(self, params: dict[str, Any]) -> web.Response:
        return self._ok(True)

    async def _getUpdates(self, params: dict[str, Any]) -> web.Response:
        self.polling_now += 1
        self.most_concurrent_polls = max(self.most_concurrent_polls, self.polling_now)
        try:
            return await self._poll(params)
        finally:
            self.polling_now -= 1
            self.polls += 1

    async def _poll(self, params: dict[str, Any]) -> web.Response:
        offset = int(params.get("offset") or 0)
        self.confirmed_below = max(self.confirmed_below, offset)
        self.unconfirmed = [u for u in self.unconfirmed if u["update_id"] >= offset]
        timeout = min(float(params.get("timeout") or 0), 0.2)
        if not self.unconfirmed:
            try:
                first = await asyncio.wait_for(self.updates.get(), timeout) if timeout else \
                    self.updates.get_nowait()
                self.unconfirmed.append(first)
            except (TimeoutError, asyncio.QueueEmpty):
                pass
        while not self.updates.empty():
            self.unconfirmed.append(self.updates.get_nowait())
        return self._ok([u for u in self.unconfirmed if u["update_id"] >= offset])

    async def start(self) -> None:
        """Listen on a free port of 127.0.0.1."""
        app = web.Application()
        app.router.add_post("/bot{token}/{method}", self._handle)
        port = await self._server.serve(app)
        self.base_url = f"http://127.0.0.1:{port}/bot"

    async def close(self) -> None:
        """Stop listening."""
        await self._server.close()


def loads_param(call: Call, name: str) -> Any:
    """A parameter PTB sent as JSON text (reply_parameters, reply_markup...)."""
    return json.loads(call.params[name])


def blocked_by_user() -> tuple[int, dict[str, Any]]:
    """The Bot API's answer when the user blocked the bot (403 -> ``Forbidden``)."""
    return 403, {"ok": False, "error_code": 403,
                 "description": "Forbidden: bot was blocked by the user"}


def upgraded_to_supergroup(new_chat_id: int) -> tuple[int, dict[str, Any]]:
    """The Bot API's answer for a group that became a supergroup (-> ``ChatMigrated``)."""
    return 400, {"ok": False, "error_code": 400,
                 "description": "Bad Request: group chat was upgraded to a supergroup chat",
                 "parameters": {"migrate_to_chat_id": new_chat_id}}


class FakeTelegramChats(FakeTelegram):
    """A FakeTelegram whose ``sendMessage`` fails for chosen chats on *every* call (a bot the
    user blocked, a group that migrated), where ``fail_next`` fails only the next call."""

    def __init__(self, token: str) -> None:
        super().__init__(token)
        self.chat_failures: dict[int, tuple[int, dict[str, Any]]] = {}

    def sent_to(self, chat_id: int) -> list[Call]:
        """The sendMessage calls (failed ones included) addressed to ``chat_id``."""
        return [c for c in self.calls_to("sendMessage") if int(c.params["chat_id"]) == chat_id]

    async def _sendMessage(self, params: dict[str, Any]) -> web.Response:
        failure = self.chat_failures.get(int(params["chat_id"]))
        if failure is not None:
            status, body = failure
            return web.json_response(body, status=status)
        return await super()._sendMessage(params)

    def open_connections(self) -> int:
        """HTTP connections clients still hold open to the fake (keep-alive included)."""
        return self._server.open_connections()
