"""A fake Slack Web API on 127.0.0.1 for slack_sdk's AsyncWebClient, a fake Socket Mode
server beside it, plus request signing.

Routes ``/api/{method}``; checks the bearer token; records every call; ``auth.test`` names the
bot; ``chat.postMessage`` echoes a message with a ``ts``. ``fail_next`` injects errors.

Socket Mode as Slack runs it: ``apps.connections.open`` takes only the app-level token (the bot
token is ``not_allowed_token_type``, any other ``invalid_auth``) and answers a ``ws://`` URL
with a one-time ticket; the websocket there says ``hello``, then carries the envelopes a test
sends (:meth:`FakeSlack.send_event`, :meth:`FakeSlack.send_command`) and records the client's
acknowledgements (:meth:`FakeSlack.wait_for_ack`). :meth:`FakeSlack.drop` closes the sockets;
:meth:`FakeSlack.ask_to_reconnect` sends ``disconnect``, as Slack does before a refresh.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from aiohttp import WSMsgType, web

from gateway.testing.loopback import LoopbackServer

TOKEN = "xoxb-test-token"
APP_TOKEN = "xapp-1-A0KRD7HC3-1767225600-0123456789abcdef"
APP_ID = "A0KRD7HC3"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TEAM_ID = "T0G9PQBBK"
BOT_USER_ID = "U0BOTUSER1"
BOT_ID = "B0BOT00001"


@dataclass
class Call:
    """One Web API call the fake received."""

    method: str
    params: dict[str, Any]
    client_port: int = 0  # the caller's TCP port: calls on one kept-alive connection share it


def sign(secret: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """Slack's v0 signature headers for ``body`` (the exact bytes sent)."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    base = b"v0:" + stamp.encode() + b":" + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={digest}",
            "Content-Type": "application/json"}


class FakeSlack:
    """The fake server. ``base_url`` ends in ``/api/`` as AsyncWebClient needs."""

    def __init__(self, token: str, app_token: str = APP_TOKEN) -> None:
        self.token = token
        self.app_token = app_token
        self.calls: list[Call] = []
        self.fail_next: dict[str, list[tuple[int, dict[str, Any], dict[str, str]]]] = {}
        self.posted = asyncio.Condition()
        self._ts = itertools.count(1)
        self._server = LoopbackServer()
        self.base_url = ""
        self.files: dict[str, tuple[str, bytes]] = {}  # served at /files/{name}: (type, bytes)
        self.downloads: list[tuple[str, str]] = []  # (name, Authorization header) of each GET
        self._tickets: set[str] = set()  # issued by apps.connections.open, each used once
        self.sockets: list[web.WebSocketResponse] = []  # open Socket Mode connections
        self.connections = 0  # Socket Mode connections ever opened
        self.acks: dict[str, dict[str, Any]] = {}  # envelope id -> the acknowledgement
        self.stray_acks: list[dict[str, Any]] = []  # acks naming no envelope sent (ignored)
        self._sent: set[str] = set()  # envelope ids sent

    def calls_to(self, method: str) -> list[Call]:
        """The recorded calls of one method, in order."""
        return [call for call in self.calls if call.method == method]

    async def wait_for(self, method: str, count: int, timeout: float = 5.0) -> list[Call]:
        """Wait until ``count`` calls of ``method`` arrived (bounded)."""
        async with self.posted:
            await asyncio.wait_for(
                self.posted.wait_for(lambda: len(self.calls_to(method)) >= count), timeout)
        return self.calls_to(method)

    async def _notify(self) -> None:
        async with self.posted:
            self.posted.notify_all()

    async def wait_until(self, done: Any, timeout: float = 5.0) -> None:
        """Wait until ``done()`` holds, re-checked at each call, connection or ack (bounded)."""
        async with self.posted:
            await asyncio.wait_for(self.posted.wait_for(done), timeout)

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        given = request.headers.get("Authorization")
        if method == "apps.connections.open":
            return await self._open_connection(given)
        if given != f"Bearer {self.token}":
            error = "not_allowed_token_type" if given == f"Bearer {self.app_token}" \
                else "invalid_auth"
            return web.json_response({"ok": False, "error": error})
        if request.content_type == "application/json":
            params = await request.json()
        else:
            params = dict(await request.post())
        peer = request.transport.get_extra_info("peername") if request.transport else None
        self.calls.append(Call(method, params, peer[1] if peer else 0))
        failures = self.fail_next.get(method)
        if failures:
            status, body, headers = failures.pop(0)
            return web.json_response(body, status=status, headers=headers)
        if method == "auth.test":
            answer = web.json_response(
                {"ok": True, "url": "https://test.slack.com/", "team": "Test", "user": "bot",
                 "team_id": TEAM_ID, "user_id": BOT_USER_ID, "bot_id": BOT_ID,
                 "is_enterprise_install": False},
                headers={"x-oauth-scopes": "chat:write,app_mentions:read,im:history,commands"})
        elif method == "chat.postMessage":
            ts = f"1767226000.{next(self._ts):06d}"
            answer = web.json_response({"ok": True, "channel": params.get("channel"), "ts": ts,
                                        "message": {"text": params.get("text"), "ts": ts,
                                                    "user": BOT_USER_ID, "bot_id": BOT_ID}})
        else:
            answer = web.json_response({"ok": True})
        async with self.posted:
            self.posted.notify_all()
        return answer

    # --- Socket Mode ---------------------------------------------------------------------------
    async def _open_connection(self, given: str | None) -> web.Response:
        """apps.connections.open: only the app-level token; a websocket URL, ticket once."""
        self.calls.append(Call("apps.connections.open", {}))
        if given != f"Bearer {self.app_token}":
            error = "not_allowed_token_type" if given == f"Bearer {self.token}" \
                else "invalid_auth"
            return web.json_response({"ok": False, "error": error})
        ticket = uuid.uuid4().hex
        self._tickets.add(ticket)
        base = self.base_url.removesuffix("/api/").replace("http://", "ws://")
        return web.json_response({"ok": True, "url": f"{base}/link/?ticket={ticket}"
                                                     f"&app_id={APP_ID}"})

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets:
            return web.json_response({"ok": False, "error": "invalid_ticket"}, status=401)
        self._tickets.discard(ticket)
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        self.sockets.append(socket)
        self.connections += 1
        await socket.send_json({"type": "hello", "num_connections": len(self.sockets),
                                "debug_info": {"host": "fake-slack", "approximate_connection_time":
                                               18060}, "connection_info": {"app_id": APP_ID}})
        await self._notify()
        try:
            async for message in socket:
                if message.type == WSMsgType.TEXT:
                    await self._acknowledged(json.loads(message.data))
        finally:
            self.sockets.remove(socket)
            await self._notify()
        return socket

    async def _acknowledged(self, ack: dict[str, Any]) -> None:
        envelope = ack.get("envelope_id")
        if isinstance(envelope, str) and envelope in self._sent and envelope not in self.acks:
            self.acks[envelope] = ack
        else:
            self.stray_acks.append(ack)
        await self._notify()

    async def _send_envelope(self, kind: str, payload: dict[str, Any], *,
                             retry_attempt: int = 0, accepts_response_payload: bool = False
                             ) -> str:
        """One envelope on the newest connection (waiting for one); its id."""
        await self.wait_until(lambda: bool(self.sockets))
        envelope = str(uuid.uuid4())
        self._sent.add(envelope)
        await self.sockets[-1].send_json({
            "envelope_id": envelope, "payload": payload, "type": kind,
            "accepts_response_payload": accepts_response_payload,
            "retry_attempt": retry_attempt,
            "retry_reason": "timeout" if retry_attempt else ""})
        return envelope

    async def send_event(self, event: dict[str, Any], event_id: str,
                         retry_attempt: int = 0) -> str:
        """An ``events_api`` envelope carrying ``event`` (a retry: ``retry_attempt`` > 0, the
        same ``event_id``, a new envelope id, as Slack redelivers); its envelope id."""
        return await self._send_envelope("events_api", event_payload(event, event_id),
                                         retry_attempt=retry_attempt)

    async def send_command(self, text: str, trigger: str, channel: str = "D0LAN2Q65") -> str:
        """A ``slash_commands`` envelope of ``/cloudybot text``; its envelope id."""
        return await self._send_envelope("slash_commands",
                                         slash_command_fields(text, trigger, channel),
                                         accepts_response_payload=True)

    async def wait_for_ack(self, envelope: str, timeout: float = 5.0) -> dict[str, Any]:
        """The client's acknowledgement of ``envelope`` (bounded wait)."""
        await self.wait_until(lambda: envelope in self.acks, timeout)
        return self.acks[envelope]

    async def ask_to_reconnect(self) -> None:
        """Send ``disconnect`` (``refresh_requested``) on every connection, as Slack does a
        while before it closes one: the client is to connect anew."""
        for socket in list(self.sockets):
            await socket.send_json({"type": "disconnect", "reason": "refresh_requested",
                                    "debug_info": {"host": "fake-slack"}})

    async def drop(self) -> None:
        """Close every Socket Mode connection, as Slack does when it refreshes one."""
        for socket in list(self.sockets):
            await socket.close()

    async def start(self) -> None:
        """Listen on a free port of 127.0.0.1."""
        app = web.Application()
        app.router.add_post("/api/{method}", self._handle)
        app.router.add_get("/link/", self._socket)
        app.router.add_get("/files/{name}", self._file)
        port = await self._server.serve(app)
        self.base_url = f"http://127.0.0.1:{port}/api/"

    def file_url(self, name: str) -> str:
        """Where the fake serves a file added to ``files`` (as ``url_private_download``)."""
        return self.base_url.removesuffix("/api/") + f"/files/{name}"

    async def _file(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.downloads.append((name, request.headers.get("Authorization", "")))
        if name not in self.files or request.headers.get("Authorization") != \
                f"Bearer {self.token}":
            return web.Response(status=404)
        content_type, data = self.files[name]
        return web.Response(body=data, content_type=content_type)

    async def close(self) -> None:
        """Close the Socket Mode connections; stop listening."""
        await self.drop()
        await self._server.close()


def event_body(event: dict[str, Any], event_id: str, team: str = TEAM_ID) -> bytes:
    """An ``event_callback`` envelope as Slack sends it, serialized once."""
    return json.dumps(event_payload(event, event_id, team)).encode()


def event_payload(event: dict[str, Any], event_id: str, team: str = TEAM_ID) -> dict[str, Any]:
    """An ``event_callback`` as Slack sends it (over HTTP, or in a Socket Mode envelope)."""
    return {
        "token": "XXYYZZverificationtoken", "team_id": team, "context_team_id": team,
        "api_app_id": "A0KRD7HC3", "event": event, "type": "event_callback",
        "event_id": event_id, "event_time": int(float(event.get("ts", "0"))),
        "authorizations": [{"enterprise_id": None, "team_id": team, "user_id": BOT_USER_ID,
                            "is_bot": True, "is_enterprise_install": False}],
        "is_ext_shared_channel": False,
    }


def slash_command_body(text: str, trigger: str, channel: str = "D0LAN2Q65",
                       user: str = "U061F7AUR", team: str = TEAM_ID) -> bytes:
    """A ``/cloudybot`` slash-command body, form-encoded as Slack posts it."""
    return urlencode(slash_command_fields(text, trigger, channel, user, team)).encode()


def slash_command_fields(text: str, trigger: str, channel: str = "D0LAN2Q65",
                         user: str = "U061F7AUR", team: str = TEAM_ID) -> dict[str, str]:
    """A ``/cloudybot`` slash command's fields (posted form-encoded, or in an envelope)."""
    return {
        "token": "verif", "team_id": team, "team_domain": "test", "channel_id": channel,
        "channel_name": "directmessage", "user_id": user, "user_name": "ada",
        "command": "/cloudybot", "text": text, "api_app_id": "A0KRD7HC3",
        "response_url": f"https://hooks.slack.com/commands/{team}/1/x",
        "trigger_id": trigger}
