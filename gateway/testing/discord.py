"""A fake Discord on 127.0.0.1 that the real discord.py talks to: the REST API under
``/api/v10`` and the Gateway websocket, one aiohttp server.

discord.py keeps its addresses in two class attributes, ``discord.http.Route.BASE`` (REST,
webhooks and interaction callbacks included) and ``discord.gateway.DiscordWebSocket.
DEFAULT_GATEWAY`` (the websocket); :func:`discord_py_at` points both at a fake (the Discord
channel plugin does the same with its ``api_base`` setting: it sets ``Route.BASE`` and takes the
websocket's address from ``GET /gateway/bot``, as Discord asks bots to).

What it refuses, as Discord does:

- a request without ``Authorization: Bot <token>`` of the configured token: 401 (so
  ``client.login`` raises ``LoginFailure``); an IDENTIFY with another token: close 4004;
- an IDENTIFY asking for the privileged ``message_content`` intent when
  ``privileged_intents`` is False (the portal's switch off): close 4014;
- message content over 2,000 characters, or a message with nothing in it: 400 (50035 / 50006);
- a message to an unknown channel (404, 10003), to a channel in ``forbidden`` (403, 50013),
  an edit of a message that is not the bot's (403, 50005) or is unknown (404, 10008);
- an interaction callback later than ``ack_seconds`` (3 s) after the interaction was sent,
  or for an unknown interaction: 404 (10062 "Unknown interaction"); a second callback: 400
  (40060 "Interaction has already been acknowledged"); a follow-up before the callback: 404
  (10015 "Unknown Webhook");
- application commands that break Discord's rules (names, descriptions, option order): 400.

``rate_limit(route, times, retry_after)`` answers the next requests of a route (``"POST
/channels/{id}/messages"``) with 429, ``Retry-After`` and ``X-RateLimit-*`` headers (and the
``Via`` header discord.py takes as "Discord, not Cloudflare"); ``buckets`` sets a real fixed-
window bucket on a route, whose ``X-RateLimit-Remaining`` discord.py follows before it would be
refused. Every REST call is recorded in ``calls``; sent messages are in ``messages`` and
:meth:`FakeDiscord.pinged` says who a message would ping under its ``allowed_mentions``.

The websocket says HELLO, answers heartbeats, takes IDENTIFY (READY, then GUILD_CREATE for the
test guild: #general, #random and a thread) and RESUME of a session it issued (RESUMED; events
sent while the client was away are not replayed; clear ``sessions`` to make it identify again).
:meth:`FakeDiscord.disconnect` drops every connection.

Events: :meth:`FakeDiscord.message` dispatches a ``MESSAGE_CREATE`` (guild channel, thread or
DM) and :meth:`FakeDiscord.slash` an ``INTERACTION_CREATE`` for an application command, to
every identified websocket.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from gateway.testing.loopback import LoopbackServer

TOKEN = "MTEwMDAwMDAwMDAwMDAwMDAwMQ.GfAkEd.fake-discord-bot-token_0123456789abcdefghij"
APPLICATION_ID = 1100000000000000001
BOT_ID = APPLICATION_ID  # a bot user's id is its application's
BOT_NAME = "cloudybot-test"
GUILD_ID = 1200000000000000001
CHANNEL_ID = 1300000000000000001  # #general
OTHER_CHANNEL_ID = 1300000000000000002  # #random
THREAD_ID = 1300000000000000003  # a public thread in #general
USER_ID = 1400000000000000001  # ada
DM = 0  # as a message's channel_id: the author's DM with the bot
OTHER_USER_ID = 1400000000000000002  # grace
OTHER_BOT_ID = 1400000000000000009
ROLE_ID = 1600000000000000001  # @moderators
MAX_CONTENT = 2000
ACK_SECONDS = 3.0
HEARTBEAT_MS = 41250
EPHEMERAL = 1 << 6
INTENT_MESSAGE_CONTENT = 1 << 15
PRIVILEGED_INTENTS = (1 << 1) | (1 << 8) | INTENT_MESSAGE_CONTENT  # members, presences, content
COMMAND_NAME = re.compile(r"[-_a-z0-9]{1,32}")
MENTION = re.compile(r"<@!?(\d+)>")
ROLE_MENTION = re.compile(r"<@&(\d+)>")
EVERYONE = re.compile(r"@(everyone|here)\b")
NAMES = {USER_ID: "ada", OTHER_USER_ID: "grace", OTHER_BOT_ID: "otherbot", BOT_ID: BOT_NAME}


def snowflakes(start: int) -> Iterator[int]:
    """Increasing ids, as Discord's snowflakes are."""
    return itertools.count(start)


def user(user_id: int) -> dict[str, Any]:
    """A user object."""
    data: dict[str, Any] = {"id": str(user_id), "username": NAMES.get(user_id, f"u{user_id}"),
                            "discriminator": "0", "global_name": NAMES.get(user_id),
                            "avatar": None, "public_flags": 0}
    if user_id in (BOT_ID, OTHER_BOT_ID):
        data["bot"] = True
    return data


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000+00:00", time.gmtime())


def _json(body: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    """A JSON answer with Discord's exact ``Content-Type`` (discord.py compares it whole)."""
    return web.Response(body=json.dumps(body).encode(), status=status, headers=headers,
                        content_type="application/json")


def error(status: int, code: int, message: str, **extra: Any) -> web.Response:
    """Discord's JSON error body."""
    return _json({"message": message, "code": code, **extra}, status=status)


def invalid_form(field_path: str, message: str) -> web.Response:
    """400 Invalid Form Body (50035), naming the field as Discord does."""
    return error(400, 50035, "Invalid Form Body",
                 errors={field_path: {"_errors": [{"code": "BASE_TYPE_BAD", "message": message}]}})


@dataclass
class Call:
    """One REST request the fake received: ``route`` is its method and path template
    (``"POST /channels/{id}/messages"``)."""

    route: str
    path: str
    body: Any
    query: Mapping[str, str]
    at: float = field(default_factory=time.monotonic)


@dataclass
class Interaction:
    """An INTERACTION_CREATE the fake sent, and what the bot did with it."""

    id: int
    token: str
    payload: dict[str, Any]
    sent_at: float
    callback: dict[str, Any] | None = None  # the callback's body, once acknowledged
    callback_after: float | None = None  # seconds from dispatch to callback
    followups: list[dict[str, Any]] = field(default_factory=list)  # the messages posted
    original: dict[str, Any] | None = None  # PATCH .../messages/@original


@dataclass
class Bucket:
    """A fixed-window rate limit: ``limit`` requests per ``per`` seconds, per major id."""

    limit: int
    per: float
    windows: dict[str, tuple[float, int]] = field(default_factory=dict)

    def take(self, major: str) -> tuple[bool, int, float]:
        """(allowed, remaining, reset after) for one more request."""
        now = time.monotonic()
        start, used = self.windows.get(major, (now, 0))
        if now - start >= self.per:
            start, used = now, 0
        reset_after = max(self.per - (now - start), 0.001)
        if used >= self.limit:
            return False, 0, reset_after
        self.windows[major] = (start, used + 1)
        return True, self.limit - used - 1, reset_after


class FakeDiscord:
    """The fake server; ``api_base`` (``http://127.0.0.1:PORT/api/v10``) and ``gateway_url``
    once started."""

    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        self.privileged_intents = True  # the portal's "Message Content Intent" switch
        self.ack_seconds = ACK_SECONDS
        self.calls: list[Call] = []
        self.messages: dict[int, dict[str, Any]] = {}  # every message, by id
        self.sent: list[dict[str, Any]] = []  # the bot's messages, in order (follow-ups too)
        self.typing: list[int] = []  # channel ids of POST /channels/{id}/typing
        self.commands: list[dict[str, Any]] = []  # the application's global commands
        self.command_puts = 0
        self.interactions: dict[int, Interaction] = {}
        self.forbidden: set[int] = set()  # channels the bot may not post in
        self.files: dict[str, tuple[str, bytes]] = {}  # attachments served at /attachments/
        self.downloads: list[str] = []
        self.identified: list[dict[str, Any]] = []  # IDENTIFY payloads (``d``)
        self.resumed: list[dict[str, Any]] = []  # RESUME payloads (``d``)
        self.sessions: set[str] = set()  # resumable session ids (clear it to refuse RESUME)
        self.buckets: dict[str, Bucket] = {}  # route -> its limit
        self.limited: dict[str, list[tuple[float, bool]]] = {}  # route -> 429s to answer
        self.refused: list[tuple[str, int]] = []  # (route, status) of every 4xx answered
        self.guild_channels: dict[int, dict[str, Any]] = {
            CHANNEL_ID: self._text_channel(CHANNEL_ID, "general"),
            OTHER_CHANNEL_ID: self._text_channel(OTHER_CHANNEL_ID, "random"),
            THREAD_ID: {"id": str(THREAD_ID), "type": 11, "guild_id": str(GUILD_ID),
                        "parent_id": str(CHANNEL_ID), "owner_id": str(USER_ID),
                        "name": "a thread", "last_message_id": None, "message_count": 0,
                        "member_count": 1, "rate_limit_per_user": 0, "flags": 0,
                        "thread_metadata": {"archived": False, "auto_archive_duration": 1440,
                                            "archive_timestamp": _now_iso(),
                                            "locked": False}},
        }
        self.dm_channels: dict[int, int] = {}  # DM channel id -> the user's id
        self._ids = snowflakes(1700000000000000001)
        self._sockets: list[web.WebSocketResponse] = []
        self._sequence = itertools.count(1)
        self._changed = asyncio.Condition()
        self._server = LoopbackServer()
        self.api_base = ""
        self.gateway_url = ""
        self.cdn_base = ""

    # --- what tests read ---------------------------------------------------------------------
    def calls_to(self, route: str) -> list[Call]:
        """The recorded calls of one route (``"POST /channels/{id}/messages"``), in order."""
        return [call for call in self.calls if call.route == route]

    def texts(self, channel_id: int | None = None) -> list[str]:
        """The content of every message the bot sent (to ``channel_id``), in order, as it
        reads now (after edits)."""
        return [m["content"] for m in self.sent
                if channel_id is None or int(m["channel_id"]) == channel_id]

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Wait until ``predicate()`` holds (checked on every request the fake answers)."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(predicate), timeout)

    async def wait_for_messages(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Wait until the bot sent ``count`` messages; return them all."""
        await self.wait_for(lambda: len(self.sent) >= count, timeout)
        return self.sent

    def connected(self) -> int:
        """How many clients are connected and identified (or resumed) now."""
        return len([socket for socket in self._sockets if not socket.closed])

    async def wait_until_ready(self, sockets: int = 1, timeout: float = 10.0) -> None:
        """Wait until ``sockets`` clients identified (and were sent READY)."""
        await self.wait_for(lambda: len(self._sockets) >= sockets, timeout)

    @staticmethod
    def pinged(message: Mapping[str, Any]) -> dict[str, list[str]]:
        """Who a message the bot sent would notify, under its ``allowed_mentions`` as Discord
        applies them: ``{"everyone": [...], "users": [...], "roles": [...]}``."""
        content = str(message.get("content") or "")
        allowed = message.get("allowed_mentions")
        parse = {"everyone", "users", "roles"} if allowed is None \
            else set(allowed.get("parse") or ())
        users = [] if allowed is None else [str(u) for u in allowed.get("users") or ()]
        roles = [] if allowed is None else [str(r) for r in allowed.get("roles") or ()]
        named_users = MENTION.findall(content)
        named_roles = ROLE_MENTION.findall(content)
        pinged_users = [u for u in named_users if "users" in parse or u in users]
        replied = message.get("_replied_user")
        if replied and (allowed is None or allowed.get("replied_user")):
            pinged_users.append(str(replied))
        return {"everyone": EVERYONE.findall(content) if "everyone" in parse else [],
                "users": pinged_users,
                "roles": [r for r in named_roles if "roles" in parse or r in roles]}

    # --- events ---------------------------------------------------------------------------------
    async def message(self, content: str, *, channel_id: int = CHANNEL_ID,
                      author: int = USER_ID, attachments: list[dict[str, Any]] | None = None,
                      reply_to: int | None = None) -> dict[str, Any]:
        """Dispatch a MESSAGE_CREATE from ``author``: in a guild channel or thread, or (with
        ``channel_id=DM``) in the author's DM with the bot. Mentions are parsed from the
        content (``<@id>``), as Discord does. Returns the message."""
        data = self._new_message(content, channel_id=self._dm_of(author) if channel_id == DM
                                 else channel_id, author=author, attachments=attachments or [],
                                 reply_to=reply_to)
        await self.dispatch("MESSAGE_CREATE", data)
        return data

    def attachment(self, name: str, content_type: str, data: bytes) -> dict[str, Any]:
        """An attachment object for :meth:`message`, its file served by the fake's CDN."""
        attachment_id = next(self._ids)
        self.files[f"{attachment_id}/{name}"] = (content_type, data)
        url = f"{self.cdn_base}/attachments/{attachment_id}/{name}"
        return {"id": str(attachment_id), "filename": name, "size": len(data),
                "content_type": content_type, "url": url, "proxy_url": url,
                "width": 64, "height": 64}

    async def slash(self, name: str, argument: str | None = None, *,
                    channel_id: int = CHANNEL_ID, author: int = USER_ID,
                    dm: bool = False) -> Interaction:
        """Dispatch an INTERACTION_CREATE for the application command ``name`` (its string
        option ``argument``, if given), as ``author`` types it in a channel, thread or DM."""
        command = next((c for c in self.commands if c["name"] == name), None)
        interaction_id = next(self._ids)
        options = []
        if argument is not None:
            option_name = "argument"
            if command is not None and command.get("options"):
                option_name = command["options"][0]["name"]
            options = [{"name": option_name, "type": 3, "value": argument}]
        channel = self._channel_object(self._dm_of(author) if dm else channel_id)
        payload: dict[str, Any] = {
            "id": str(interaction_id), "application_id": str(APPLICATION_ID), "type": 2,
            "token": f"interaction-token-{interaction_id}", "version": 1,
            "data": {"id": command["id"] if command else "1", "name": name, "type": 1,
                     "options": options},
            "channel_id": channel["id"], "channel": channel, "locale": "en-US",
            "app_permissions": "2251799813685247", "entitlements": [],
            "authorizing_integration_owners": {"0": str(GUILD_ID)} if not dm else {"1": "0"},
            "context": 1 if dm else 0, "attachment_size_limit": 10485760,
        }
        if dm:
            payload["user"] = user(author)
        else:
            payload["guild_id"] = str(GUILD_ID)
            payload["guild_locale"] = "en-US"
            payload["member"] = self._member(author)
        interaction = Interaction(interaction_id, payload["token"], payload, time.monotonic())
        self.interactions[interaction_id] = interaction
        await self.dispatch("INTERACTION_CREATE", payload)
        return interaction

    async def dispatch(self, event: str, data: Mapping[str, Any]) -> None:
        """Send a DISPATCH (op 0) to every identified websocket."""
        for socket in list(self._sockets):
            if not socket.closed:
                await socket.send_json({"op": 0, "t": event, "s": next(self._sequence),
                                        "d": data})

    async def disconnect(self, code: int = 4000) -> None:
        """Close every websocket (a client reconnects unless the code forbids it)."""
        for socket in list(self._sockets):
            await socket.close(code=code)
        self._sockets.clear()

    # --- REST ------------------------------------------------------------------------------------
    def rate_limit(self, route: str, times: int = 1, retry_after: float = 0.2,
                   is_global: bool = False) -> None:
        """Answer the next ``times`` requests of ``route`` with 429."""
        self.limited.setdefault(route, []).extend([(retry_after, is_global)] * times)

    def _text_channel(self, channel_id: int, name: str) -> dict[str, Any]:
        return {"id": str(channel_id), "type": 0, "guild_id": str(GUILD_ID), "name": name,
                "position": 0, "permission_overwrites": [], "nsfw": False, "topic": None,
                "last_message_id": None, "rate_limit_per_user": 0, "parent_id": None,
                "flags": 0}

    def _dm_of(self, user_id: int) -> int:
        for channel_id, recipient in self.dm_channels.items():
            if recipient == user_id:
                return channel_id
        channel_id = next(self._ids)
        self.dm_channels[channel_id] = user_id
        return channel_id

    def _channel_object(self, channel_id: int) -> dict[str, Any]:
        if channel_id in self.dm_channels:
            return {"id": str(channel_id), "type": 1, "last_message_id": None, "flags": 0,
                    "recipients": [user(self.dm_channels[channel_id])]}
        return self.guild_channels[channel_id]

    def _member(self, user_id: int) -> dict[str, Any]:
        return {"user": user(user_id), "roles": [], "joined_at": _now_iso(), "deaf": False,
                "mute": False, "flags": 0, "pending": False, "nick": None, "avatar": None,
                "permissions": "2251799813685247", "communication_disabled_until": None}

    def _new_message(self, content: str, *, channel_id: int, author: int,
                     **extra: Any) -> dict[str, Any]:
        """A message as Discord stores it (in a guild when ``channel_id`` is a guild's
        channel); ``extra``: ``attachments``, ``reply_to`` (a message id) and raw fields."""
        attachments = extra.pop("attachments", [])
        reply_to = extra.pop("reply_to", None)
        guild = channel_id in self.guild_channels
        message_id = next(self._ids)
        data: dict[str, Any] = {
            "id": str(message_id), "channel_id": str(channel_id), "author": user(author),
            "content": content, "timestamp": _now_iso(), "edited_timestamp": None,
            "tts": False, "mention_everyone": bool(EVERYONE.search(content)),
            "mentions": [user(int(u)) for u in dict.fromkeys(MENTION.findall(content))],
            "mention_roles": list(dict.fromkeys(ROLE_MENTION.findall(content))),
            "attachments": attachments, "embeds": [], "pinned": False, "type": 0, "flags": 0,
            "components": [], **extra,
        }
        if guild:
            data["guild_id"] = str(GUILD_ID)
            member = self._member(author)
            member.pop("user")
            data["member"] = member
        if reply_to is not None and reply_to in self.messages:
            data["type"] = 19
            data["message_reference"] = {"message_id": str(reply_to),
                                         "channel_id": str(channel_id)}
            data["referenced_message"] = self.messages[reply_to]
        self.messages[message_id] = data
        return data

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bot {self.token}"

    def _limit_headers(self, route: str, major: str) -> tuple[dict[str, str], bool]:
        """The X-RateLimit-* headers of a request, and whether its bucket refuses it."""
        bucket = self.buckets.get(route)
        bucket_hash = f"fake{abs(hash(route)) % 10**8:08d}"
        if bucket is None:
            return ({"X-RateLimit-Limit": "50", "X-RateLimit-Remaining": "49",
                     "X-RateLimit-Reset-After": "1.000", "X-RateLimit-Bucket": bucket_hash,
                     "X-RateLimit-Reset": f"{time.time() + 1:.3f}"}, False)
        allowed, remaining, reset_after = bucket.take(major)
        return ({"X-RateLimit-Limit": str(bucket.limit), "X-RateLimit-Remaining": str(remaining),
                 "X-RateLimit-Reset-After": f"{reset_after:.3f}",
                 "X-RateLimit-Reset": f"{time.time() + reset_after:.3f}",
                 "X-RateLimit-Bucket": bucket_hash}, not allowed)

    @staticmethod
    def _too_many(retry_after: float, is_global: bool,
                  headers: dict[str, str]) -> web.Response:
        headers = {**headers, "Retry-After": str(max(1, round(retry_after))),
                   "X-RateLimit-Remaining": "0", "X-RateLimit-Scope": "user",
                   "Via": "1.1 google"}
        if is_global:
            headers["X-RateLimit-Global"] = "true"
        return _json({"message": "You are being rate limited.",
                                  "retry_after": retry_after, "global": is_global, "code": 0},
                                 status=429, headers=headers)

    def _handler(self, route: str, answer: Callable[..., Any], *,
                 authorized: bool = True) -> Callable[[web.Request], Any]:
        """Wrap a route: authorization, recording, injected 429s, rate-limit headers."""
        async def handle(request: web.Request) -> web.StreamResponse:
            if authorized and not self._authorized(request):
                return error(401, 0, "401: Unauthorized")
            body: Any = None
            if request.can_read_body:
                raw = await request.read()
                body = json.loads(raw) if raw else None
            self.calls.append(Call(route, request.path, body, dict(request.query)))
            major = next(iter(request.match_info.values()), "")
            headers, refused = self._limit_headers(route, major)
            injected = self.limited.get(route)
            try:
                if injected:
                    retry_after, is_global = injected.pop(0)
                    return self._too_many(retry_after, is_global, headers)
                if refused:
                    return self._too_many(float(headers["X-RateLimit-Reset-After"]), False,
                                          headers)
                response: web.StreamResponse = await answer(request, body)
                if response.status >= 400:
                    self.refused.append((route, response.status))
                response.headers.update(headers)
                return response
            finally:
                async with self._changed:
                    self._changed.notify_all()
        return handle

    async def _gateway_bot(self, request: web.Request, body: Any) -> web.Response:
        return _json({"url": self.gateway_url, "shards": 1, "session_start_limit": {
            "total": 1000, "remaining": 999, "reset_after": 14400000, "max_concurrency": 1}})

    async def _me(self, request: web.Request, body: Any) -> web.Response:
        return _json({**user(BOT_ID), "verified": True, "mfa_enabled": False,
                                  "flags": 0, "bot": True, "locale": "en-US"})

    async def _application(self, request: web.Request, body: Any) -> web.Response:
        return _json({
            "id": str(APPLICATION_ID), "name": BOT_NAME, "icon": None, "description": "",
            "bot_public": True, "bot_require_code_grant": False, "verify_key": "0" * 64,
            "owner": user(USER_ID), "flags": 1 << 19, "team": None, "summary": "",
            "interactions_endpoint_url": None})

    async def _channel(self, request: web.Request, body: Any) -> web.Response:
        channel_id = int(request.match_info["channel"])
        if channel_id not in self.guild_channels and channel_id not in self.dm_channels:
            return error(404, 10003, "Unknown Channel")
        return _json(self._channel_object(channel_id))

    def _refuse_content(self, body: Any, *, editing: bool = False) -> web.Response | None:
        if not isinstance(body, dict):
            return invalid_form("_root", "a JSON object is required")
        content = body.get("content")
        if content is not None and not isinstance(content, str):
            return invalid_form("content", "Could not interpret as string.")
        if content and len(content) > MAX_CONTENT:
            return invalid_form("content", f"Must be {MAX_CONTENT} or fewer in length.")
        if not editing and not (content or "").strip() and not body.get("embeds") \
                and not body.get("attachments") and not body.get("sticker_ids"):
            return error(400, 50006, "Cannot send an empty message")
        allowed = body.get("allowed_mentions")
        if allowed is not None:
            parse = set(allowed.get("parse") or ())
            if ("users" in parse and allowed.get("users")) or \
                    ("roles" in parse and allowed.get("roles")):
                return invalid_form("allowed_mentions", "parse and a list are exclusive")
        return None

    async def _create_message(self, request: web.Request, body: Any) -> web.Response:
        channel_id = int(request.match_info["channel"])
        if channel_id not in self.guild_channels and channel_id not in self.dm_channels:
            return error(404, 10003, "Unknown Channel")
        if channel_id in self.forbidden:
            return error(403, 50013, "Missing Permissions")
        refusal = self._refuse_content(body)
        if refusal is not None:
            return refusal
        reference = body.get("message_reference")
        reply_to = None
        if reference is not None:
            reply_to = int(reference["message_id"])
            if reply_to not in self.messages and reference.get("fail_if_not_exists", True):
                return invalid_form("message_reference", "Unknown message")
        message = self._new_message(
            body.get("content") or "", channel_id=channel_id, author=BOT_ID,
            reply_to=reply_to)
        message["allowed_mentions"] = body.get("allowed_mentions")
        if reply_to is not None and reply_to in self.messages:
            message["_replied_user"] = self.messages[reply_to]["author"]["id"]
        self.sent.append(message)
        return _json(_public(message))

    async def _edit_message(self, request: web.Request, body: Any) -> web.Response:
        channel_id, message_id = int(request.match_info["channel"]), \
            int(request.match_info["message"])
        message = self.messages.get(message_id)
        if message is None or int(message["channel_id"]) != channel_id:
            return error(404, 10008, "Unknown Message")
        if int(message["author"]["id"]) != BOT_ID:
            return error(403, 50005, "Cannot edit a message authored by another user")
        refusal = self._refuse_content(body, editing=True)
        if refusal is not None:
            return refusal
        if "content" in body:
            message["content"] = body["content"] or ""
        if "allowed_mentions" in body:
            message["allowed_mentions"] = body["allowed_mentions"]
        message["edited_timestamp"] = _now_iso()
        return _json(_public(message))

    async def _typing(self, request: web.Request, body: Any) -> web.Response:
        channel_id = int(request.match_info["channel"])
        if channel_id not in self.guild_channels and channel_id not in self.dm_channels:
            return error(404, 10003, "Unknown Channel")
        self.typing.append(channel_id)
        return web.Response(status=204)

    async def _get_commands(self, request: web.Request, body: Any) -> web.Response:
        if int(request.match_info["application"]) != APPLICATION_ID:
            return error(403, 50001, "Missing Access")
        return _json(self.commands)

    async def _put_commands(self, request: web.Request, body: Any) -> web.Response:
        if int(request.match_info["application"]) != APPLICATION_ID:
            return error(403, 50001, "Missing Access")
        if not isinstance(body, list) or len(body) > 100:
            return invalid_form("_root", "at most 100 commands")
        stored = []
        for index, command in enumerate(body):
            refusal = _refuse_command(index, command)
            if refusal is not None:
                return refusal
            existing = next((c for c in self.commands if c["name"] == command["name"]), None)
            stored.append({
                "id": existing["id"] if existing else str(next(self._ids)),
                "application_id": str(APPLICATION_ID), "version": str(next(self._ids)),
                "default_member_permissions": None, "type": command.get("type", 1),
                "nsfw": False, "description_localizations": None, "name_localizations": None,
                "contexts": command.get("contexts"),
                "integration_types": command.get("integration_types", [0]),
                **{k: v for k, v in command.items() if k not in ("contexts",
                                                                  "integration_types")}})
        names = [c["name"] for c in stored]
        if len(set(names)) != len(names):
            return invalid_form("_root", "Application command names must be unique")
        self.commands = stored
        self.command_puts += 1
        return _json(stored)

    def _interaction(self, request: web.Request) -> Interaction | None:
        interaction = self.interactions.get(int(request.match_info["interaction"]))
        if interaction is None or interaction.token != request.match_info["token"]:
            return None
        return interaction

    async def _callback(self, request: web.Request, body: Any) -> web.Response:
        interaction = self._interaction(request)
        elapsed = None if interaction is None else time.monotonic() - interaction.sent_at
        if interaction is None or elapsed is None or elapsed > self.ack_seconds:
            return error(404, 10062, "Unknown interaction")
        if interaction.callback is not None:
            return error(400, 40060, "Interaction has already been acknowledged.")
        if not isinstance(body, dict) or body.get("type") not in (4, 5):
            return invalid_form("type", "Value must be one of {4, 5}.")
        if body["type"] == 4:
            refusal = self._refuse_content(body.get("data") or {})
            if refusal is not None:
                return refusal
        interaction.callback, interaction.callback_after = body, elapsed
        flags = int((body.get("data") or {}).get("flags") or 0)
        if body["type"] == 4:
            interaction.followups.append(self._interaction_message(interaction,
                                                                   body.get("data") or {}))
        if request.query.get("with_response") in ("1", "true", "True"):
            return _json({"interaction": {
                "id": str(interaction.id), "type": 2,
                "response_message_loading": body["type"] == 5,
                "response_message_ephemeral": bool(flags & EPHEMERAL)}})
        return web.Response(status=204)

    def _interaction_message(self, interaction: Interaction,
                             data: Mapping[str, Any]) -> dict[str, Any]:
        payload = interaction.payload
        channel_id = int(payload["channel_id"])
        message = self._new_message(
            str(data.get("content") or ""), channel_id=channel_id, author=BOT_ID,
            webhook_id=str(APPLICATION_ID), application_id=str(APPLICATION_ID),
            interaction_metadata={
                "id": str(interaction.id), "type": 2, "name": payload["data"]["name"],
                "user": (payload.get("member") or payload)["user"],
                "authorizing_integration_owners": payload["authorizing_integration_owners"]})
        message["flags"] = int(data.get("flags") or 0)
        message["allowed_mentions"] = data.get("allowed_mentions")
        self.sent.append(message)
        return message

    async def _followup(self, request: web.Request, body: Any) -> web.Response:
        interaction = next((i for i in self.interactions.values()
                            if i.token == request.match_info["token"]), None)
        if int(request.match_info["application"]) != APPLICATION_ID or interaction is None \
                or interaction.callback is None:
            return error(404, 10015, "Unknown Webhook")
        refusal = self._refuse_content(body)
        if refusal is not None:
            return refusal
        data = dict(body)
        if interaction.callback.get("type") == 5 and not interaction.followups:
            # the first follow-up of a deferred answer replaces "thinking…", keeping its flags
            data["flags"] = int((interaction.callback.get("data") or {}).get("flags") or 0)
        message = self._interaction_message(interaction, data)
        interaction.followups.append(message)
        if request.query.get("wait") in ("1", "true", "True"):
            return _json(_public(message))
        return web.Response(status=204)

    async def _edit_original(self, request: web.Request, body: Any) -> web.Response:
        interaction = next((i for i in self.interactions.values()
                            if i.token == request.match_info["token"]), None)
        if interaction is None or interaction.callback is None:
            return error(404, 10015, "Unknown Webhook")
        refusal = self._refuse_content(body, editing=True)
        if refusal is not None:
            return refusal
        interaction.original = body
        if not interaction.followups:
            interaction.followups.append(self._interaction_message(interaction, body))
        else:
            interaction.followups[0]["content"] = body.get("content") or ""
        return _json(_public(interaction.followups[0]))

    async def _attachment(self, request: web.Request) -> web.Response:
        name = f"{request.match_info['id']}/{request.match_info['name']}"
        self.downloads.append(name)
        if name not in self.files:
            return web.Response(status=404)
        content_type, data = self.files[name]
        return web.Response(body=data, content_type=content_type)

    # --- the Gateway --------------------------------------------------------------------------
    def _ready(self, intents: int) -> dict[str, Any]:
        return {"v": 10, "user": {**user(BOT_ID), "verified": True, "mfa_enabled": False,
                                  "flags": 0, "bot": True},
                "guilds": [{"id": str(GUILD_ID), "unavailable": True}],
                "session_id": f"session-{next(self._ids)}",
                "resume_gateway_url": self.gateway_url, "shard": [0, 1],
                "application": {"id": str(APPLICATION_ID), "flags": 1 << 19},
                "private_channels": [], "relationships": [], "presences": [],
                "guild_join_requests": [], "geo_ordered_rtc_regions": [],
                "_trace": ["fake-discord"]}

    def _guild(self) -> dict[str, Any]:
        everyone = {"id": str(GUILD_ID), "name": "@everyone", "permissions": "1071698660929",
                    "position": 0, "color": 0, "hoist": False, "managed": False,
                    "mentionable": False, "flags": 0}
        moderators = {**everyone, "id": str(ROLE_ID), "name": "moderators", "position": 1,
                      "mentionable": True}
        channels = [c for c in self.guild_channels.values() if c["type"] in (0, 2, 4, 5)]
        threads = [c for c in self.guild_channels.values() if c["type"] in (10, 11, 12)]
        return {"id": str(GUILD_ID), "name": "Test Guild", "icon": None, "splash": None,
                "discovery_splash": None, "owner_id": str(USER_ID), "afk_channel_id": None,
                "afk_timeout": 300, "verification_level": 0,
                "default_message_notifications": 0, "explicit_content_filter": 0,
                "roles": [everyone, moderators], "emojis": [], "stickers": [],
                "features": [], "mfa_level": 0, "application_id": None,
                "system_channel_id": None, "system_channel_flags": 0,
                "rules_channel_id": None, "vanity_url_code": None, "description": None,
                "banner": None, "premium_tier": 0, "premium_subscription_count": 0,
                "preferred_locale": "en-US", "public_updates_channel_id": None,
                "nsfw_level": 0, "premium_progress_bar_enabled": False,
                "joined_at": _now_iso(), "large": False, "unavailable": False,
                "member_count": 3, "voice_states": [], "presences": [],
                "members": [{**self._member(BOT_ID), "roles": []}],
                "channels": channels, "threads": threads, "stage_instances": [],
                "guild_scheduled_events": [], "soundboard_sounds": [], "lazy": True}

    async def _websocket(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse(autoping=True, max_msg_size=0)
        await socket.prepare(request)
        await socket.send_json({"op": 10, "s": None, "t": None,
                                "d": {"heartbeat_interval": HEARTBEAT_MS}})
        try:
            async for frame in socket:
                if frame.type != WSMsgType.TEXT:
                    continue
                payload = json.loads(frame.data)
                op = payload.get("op")
                if op == 1:
                    await socket.send_json({"op": 11, "s": None, "t": None, "d": None})
                elif op == 2:
                    await self._identify(socket, payload.get("d") or {})
                elif op == 6:
                    await self._resume(socket, payload.get("d") or {})
        finally:
            if socket in self._sockets:
                self._sockets.remove(socket)
            async with self._changed:
                self._changed.notify_all()
        return socket

    async def _resume(self, socket: web.WebSocketResponse, data: Mapping[str, Any]) -> None:
        """RESUME a session READY named (events dispatched meanwhile are not replayed);
        an unknown one, or a wrong token, is told to identify again (op 9, false)."""
        self.resumed.append(dict(data))
        if data.get("session_id") not in self.sessions or data.get("token") != self.token:
            await socket.send_json({"op": 9, "s": None, "t": None, "d": False})
            return
        await socket.send_json({"op": 0, "t": "RESUMED", "s": next(self._sequence), "d": {}})
        self._sockets.append(socket)
        async with self._changed:
            self._changed.notify_all()

    async def _identify(self, socket: web.WebSocketResponse, data: Mapping[str, Any]) -> None:
        self.identified.append(dict(data))
        if data.get("token") != self.token:
            await socket.close(code=4004, message=b"Authentication failed.")
            return
        intents = int(data.get("intents") or 0)
        if intents & PRIVILEGED_INTENTS and not self.privileged_intents:
            await socket.close(code=4014, message=b"Disallowed intent(s).")
            return
        ready = self._ready(intents)
        self.sessions.add(ready["session_id"])
        await socket.send_json({"op": 0, "t": "READY", "s": next(self._sequence), "d": ready})
        await socket.send_json({"op": 0, "t": "GUILD_CREATE", "s": next(self._sequence),
                                "d": self._guild()})
        self._sockets.append(socket)
        async with self._changed:
            self._changed.notify_all()

    # --- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Listen on a free port of 127.0.0.1."""
        app = web.Application()
        routes: list[tuple[str, str, Callable[..., Any], bool]] = [
            ("GET", "/gateway/bot", self._gateway_bot, True),
            ("GET", "/users/@me", self._me, True),
            ("GET", "/oauth2/applications/@me", self._application, True),
            ("GET", "/channels/{channel}", self._channel, True),
            ("POST", "/channels/{channel}/messages", self._create_message, True),
            ("PATCH", "/channels/{channel}/messages/{message}", self._edit_message, True),
            ("POST", "/channels/{channel}/typing", self._typing, True),
            ("GET", "/applications/{application}/commands", self._get_commands, True),
            ("PUT", "/applications/{application}/commands", self._put_commands, True),
            ("POST", "/interactions/{interaction}/{token}/callback", self._callback, False),
            ("POST", "/webhooks/{application}/{token}", self._followup, False),
            ("PATCH", "/webhooks/{application}/{token}/messages/@original",
             self._edit_original, False),
        ]
        for method, path, answer, authorized in routes:
            name = f"{method} {path.replace('{channel}', '{id}')}"
            app.router.add_route(method, "/api/v10" + path,
                                 self._handler(name, answer, authorized=authorized))
        app.router.add_get("/gateway", self._websocket)
        app.router.add_get("/attachments/{id}/{name}", self._attachment)
        port = await self._server.serve(app)
        root = f"http://127.0.0.1:{port}"
        self.api_base, self.gateway_url, self.cdn_base = \
            f"{root}/api/v10", f"ws://127.0.0.1:{port}/gateway", root

    async def close(self) -> None:
        """Close the websockets and stop listening."""
        for socket in list(self._sockets):
            await socket.close(code=1001)
        await self._server.close()


def _public(message: Mapping[str, Any]) -> dict[str, Any]:
    """A message as the REST API returns it: without the Gateway event's extra fields
    (``guild_id``, ``member``) and the fake's own bookkeeping."""
    return {k: v for k, v in message.items()
            if k not in ("allowed_mentions", "_replied_user", "guild_id", "member")}


def _refuse_command(index: int, command: Any) -> web.Response | None:
    """Discord's checks of one application command of a bulk overwrite."""
    where = f"{index}"
    if not isinstance(command, dict):
        return invalid_form(where, "must be an object")
    name, description = command.get("name"), command.get("description")
    if not isinstance(name, str) or not COMMAND_NAME.fullmatch(name):
        return invalid_form(f"{where}.name", "Command name is invalid")
    if not isinstance(description, str) or not 1 <= len(description) <= 100:
        return invalid_form(f"{where}.description", "Must be between 1 and 100 in length.")
    options = command.get("options") or []
    if len(options) > 25:
        return invalid_form(f"{where}.options", "Must be 25 or fewer in length.")
    seen_optional = False
    for number, option in enumerate(options):
        place = f"{where}.options.{number}"
        if not isinstance(option.get("name"), str) or not COMMAND_NAME.fullmatch(option["name"]):
            return invalid_form(f"{place}.name", "Command name is invalid")
        text = option.get("description")
        if not isinstance(text, str) or not 1 <= len(text) <= 100:
            return invalid_form(f"{place}.description", "Must be between 1 and 100 in length.")
        if option.get("type") not in range(1, 12):
            return invalid_form(f"{place}.type", "Value must be one of 1..11.")
        if option.get("required"):
            if seen_optional:
                return invalid_form(f"{place}.required",
                                    "Required options must be placed before non-required "
                                    "options")
        else:
            seen_optional = True
    return None


@contextlib.contextmanager
def discord_py_at(fake: FakeDiscord) -> Iterator[None]:
    """Point discord.py's REST routes and its websocket address at ``fake`` (restored after):
    for a test of a bare ``discord.Client``. The Discord channel plugin takes ``api_base``
    instead, and does the same."""
    import yarl
    from discord.gateway import DiscordWebSocket
    from discord.http import Route

    saved = Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY
    Route.BASE = fake.api_base
    DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(fake.gateway_url)
    try:
        yield
    finally:
        Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY = saved


@contextlib.asynccontextmanager
async def running_fake(token: str = TOKEN) -> AsyncIterator[FakeDiscord]:
    """A started :class:`FakeDiscord`, closed after."""
    fake = FakeDiscord(token)
    await fake.start()
    try:
        yield fake
    finally:
        await fake.close()
