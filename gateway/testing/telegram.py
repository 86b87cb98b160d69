"""A fake Telegram Bot API on 127.0.0.1 that python-telegram-bot talks to over HTTP.

Routes ``/bot{token}/{method}``: requests arrive form-encoded (every value a string, objects as
JSON), answers are ``{"ok": true, "result": ...}``. Every call is recorded. ``fail_next``
injects errors; ``updates`` feeds ``getUpdates`` (bounded long poll) for polling mode. As the
real Bot API, getUpdates keeps returning an update until a later call confirms it with an
``offset`` above its ``update_id``.

sendMessage checks what Telegram checks: a text of 1-4096 UTF-16 code units, and ``entities``
(:func:`sent_entities`) of known types inside the text; it answers 400 otherwise.
``refuse_entities`` makes it refuse every message with entities ("can't parse entities"), and
``group_flood`` = (messages, seconds) answers 429 to a group sent more than that.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from gateway.testing.loopback import LoopbackServer

TOKEN = "123456:TEST-token"
SECRET = "webhook-s3cret_value"
BOT_ID = 7000000001
BOT_USERNAME = "gateway_test_bot"
MAX_TEXT_UNITS = 4096
WEBHOOK_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")
ENTITY_TYPES = frozenset({
    "mention", "hashtag", "cashtag", "bot_command", "url", "email", "phone_number", "bold",
    "italic", "underline", "strikethrough", "spoiler", "blockquote", "expandable_blockquote",
    "code", "pre", "text_link", "text_mention", "custom_emoji", "date_time"})


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
        # sent messages: what each holds now (sendMessage, then editMessageText)
        self.texts_by_id: dict[int, tuple[str, list[Any]]] = {}
        self.chat_of: dict[int, int] = {}
        self.files: dict[str, bytes] = {}  # by file_id: getFile and its download
        self.downloads: list[str] = []
        self.deleted: set[int] = set()  # ids a test pretends a user deleted
        self._server = LoopbackServer()
        self.base_url = ""
        self.polls = 0  # getUpdates calls answered
        self.webhook: tuple[str, str | None] = ("", None)  # (url, secret) setWebhook last set
        self.unconfirmed: list[dict[str, Any]] = []  # handed out, not yet confirmed
        self.confirmed_below = 0  # the highest offset a getUpdates call sent
        self.polling_now = 0  # getUpdates calls in flight
        self.most_concurrent_polls = 0
        self.refuse_entities = False  # answer 400 "can't parse entities" to any entities
        self.group_flood: tuple[int, float] | None = None  # (messages, seconds) per group
        self.floods = 0  # 429s answered for group_flood
        self._group_sends: defaultdict[int, deque[float]] = defaultdict(deque)

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
        text = params.get("text", "")
        entities = json.loads(params.get("entities") or "[]")
        refusal = refuse_message(text, entities)
        if refusal is None and entities and self.refuse_entities:
            refusal = "can't parse entities: Unsupported entity at byte offset 0"
        if refusal is not None:
            return bad_request(refusal)
        if chat_id < 0 and self.group_flood is not None and self._flooded(chat_id):
            self.floods += 1
            return web.json_response({
                "ok": False, "error_code": 429, "parameters": {"retry_after": 1},
                "description": "Too Many Requests: retry after 1"}, status=429)
        message: dict[str, Any] = {
            "message_id": next(self._message_ids), "date": 1767225700,
            "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"},
            "from": {"id": BOT_ID, "is_bot": True, "first_name": "Gateway Test",
                     "username": BOT_USERNAME},
            "text": text,
        }
        if entities:
            message["entities"] = entities
        if "message_thread_id" in params:
            message["message_thread_id"] = int(params["message_thread_id"])
            message["is_topic_message"] = True
        self.texts_by_id[message["message_id"]] = (text, entities)
        self.chat_of[message["message_id"]] = chat_id
        return self._ok(message)

    def _flooded(self, chat_id: int) -> bool:
        """More than ``group_flood`` messages to this group within its window?"""
        assert self.group_flood is not None
        most, seconds = self.group_flood
        now = time.monotonic()
        sends = self._group_sends[chat_id]
        while sends and sends[0] <= now - seconds:
            sends.popleft()
        if len(sends) >= most:
            return True
        sends.append(now)
        return False

    async def _sendChatAction(self, params: dict[str, Any]) -> web.Response:
        return self._ok(True)

    async def _getFile(self, params: dict[str, Any]) -> web.Response:
        data = self.files.get(str(params["file_id"]))
        if data is None:
            return bad_request("invalid file_id")
        return self._ok({"file_id": params["file_id"], "file_unique_id": "u1",
                         "file_size": len(data), "file_path": f"photos/{params['file_id']}"})

    async def _download(self, request: web.Request) -> web.Response:
        self.downloads.append(request.match_info["file_id"])
        data = self.files.get(request.match_info["file_id"])
        if request.match_info["token"] != self.token or data is None:
            return web.Response(status=404)
        return web.Response(body=data, content_type="image/jpeg")

    async def _sendMessageDraft(self, params: dict[str, Any]) -> web.Response:
        if int(params["chat_id"]) < 0:
            return bad_request("message drafts are for private chats only")
        refusal = refuse_message(params.get("text", ""),
                                 json.loads(params.get("entities") or "[]"))
        return bad_request(refusal) if refusal is not None else self._ok(True)

    async def _editMessageText(self, params: dict[str, Any]) -> web.Response:
        chat_id, message_id = int(params["chat_id"]), int(params["message_id"])
        if self.chat_of.get(message_id) != chat_id or message_id in self.deleted:
            return bad_request("message to edit not found")
        text = params.get("text", "")
        entities = json.loads(params.get("entities") or "[]")
        refusal = refuse_message(text, entities)
        if refusal is not None:
            return bad_request(refusal)
        if self.texts_by_id.get(message_id) == (text, entities):
            return bad_request("message is not modified: specified new message content and "
                               "reply markup are exactly the same as a current content")
        self.texts_by_id[message_id] = (text, entities)
        return self._ok({"message_id": message_id, "date": 1767225700, "text": text,
                         "chat": {"id": chat_id, "type": "supergroup"}})

    async def _setWebhook(self, params: dict[str, Any]) -> web.Response:
        """Refused as the Bot API refuses: a URL that is not HTTPS or not on 443, 80, 88 or
        8443, a secret token outside 1-256 of ``A-Za-z0-9_-``; an empty URL removes it."""
        url = str(params.get("url") or "")
        secret = params.get("secret_token")
        if url:
            parsed = urlsplit(url)
            if parsed.scheme != "https" or not parsed.hostname:
                return bad_request("bad webhook: An HTTPS URL must be provided for webhook")
            if (parsed.port or 443) not in (80, 88, 443, 8443):
                return bad_request("bad webhook: Webhook can be set up only on ports 80, 88, "
                                   "443 or 8443")
        if secret is not None and not WEBHOOK_SECRET.fullmatch(str(secret)):
            return bad_request("secret token contains unallowed characters")
        self.webhook = (url, None if secret is None else str(secret))
        return self._ok(True)

    async def _deleteWebhook(self, params: dict[str, Any]) -> web.Response:
        self.webhook = ("", None)
        return self._ok(True)

    async def _getUpdates(self, params: dict[str, Any]) -> web.Response:
        if self.webhook[0]:  # as the Bot API: polling and a webhook exclude each other
            return web.json_response({
                "ok": False, "error_code": 409, "description": "Conflict: can't use "
                "getUpdates method while webhook is active; use deleteWebhook to delete the "
                "webhook first"}, status=409)
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
        app.router.add_get("/file/bot{token}/photos/{file_id}", self._download)
        port = await self._server.serve(app)
        self.base_url = f"http://127.0.0.1:{port}/bot"

    async def close(self) -> None:
        """Stop listening."""
        await self._server.close()


def utf16_len(text: str) -> int:
    """The length Telegram measures: UTF-16 code units (an emoji outside the BMP is two)."""
    return len(text.encode("utf-16-le")) // 2


def refuse_message(text: str, entities: list[dict[str, Any]]) -> str | None:
    """Why the Bot API would refuse this sendMessage text and entities, or None."""
    size = utf16_len(text)
    if not text.strip():
        return "message text is empty"
    if size > MAX_TEXT_UNITS:
        return "message is too long"
    for entity in entities:
        offset, length = entity.get("offset"), entity.get("length")
        if entity.get("type") not in ENTITY_TYPES or not isinstance(offset, int) \
                or not isinstance(length, int) or offset < 0 or length <= 0 \
                or offset + length > size:
            return f"can't parse entities: wrong entity {json.dumps(entity)}"
        if entity["type"] == "text_link" and not entity.get("url"):
            return "can't parse entities: text_link without url"
    return None


def bad_request(reason: str) -> web.Response:
    """The Bot API's 400 (-> ``BadRequest``)."""
    return web.json_response({"ok": False, "error_code": 400,
                              "description": f"Bad Request: {reason}"}, status=400)


def sent_entities(call: Call) -> list[dict[str, Any]]:
    """The ``entities`` of a sendMessage call (PTB sends them as JSON text), [] if none."""
    return list(json.loads(call.params.get("entities") or "[]"))


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
