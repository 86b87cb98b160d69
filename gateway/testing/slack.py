"""A fake Slack Web API on 127.0.0.1 for slack_sdk's AsyncWebClient, plus request signing.

Routes ``/api/{method}``; checks the bearer token; records every call; ``auth.test`` names the
bot; ``chat.postMessage`` echoes a message with a ``ts``. ``fail_next`` injects errors.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from gateway.testing.loopback import LoopbackServer

TOKEN = "xoxb-test-token"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TEAM_ID = "T0G9PQBBK"
BOT_USER_ID = "U0BOTUSER1"
BOT_ID = "B0BOT00001"


@dataclass
class Call:
    """One Web API call the fake received."""

    method: str
    params: dict[str, Any]


def sign(secret: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """Slack's v0 signature headers for ``body`` (the exact bytes sent)."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    base = b"v0:" + stamp.encode() + b":" + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={digest}",
            "Content-Type": "application/json"}


class FakeSlack:
    """The fake server. ``base_url`` ends in ``/api/`` as AsyncWebClient needs."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.calls: list[Call] = []
        self.fail_next: dict[str, list[tuple[int, dict[str, Any], dict[str, str]]]] = {}
        self.posted = asyncio.Condition()
        self._ts = itertools.count(1)
        self._server = LoopbackServer()
        self.base_url = ""
        self.files: dict[str, tuple[str, bytes]] = {}  # served at /files/{name}: (type, bytes)
        self.downloads: list[tuple[str, str]] = []  # (name, Authorization header) of each GET

    def calls_to(self, method: str) -> list[Call]:
        """The recorded calls of one method, in order."""
        return [call for call in self.calls if call.method == method]

    async def wait_for(self, method: str, count: int, timeout: float = 5.0) -> list[Call]:
        """Wait until ``count`` calls of ``method`` arrived (bounded)."""
        async with self.posted:
            await asyncio.wait_for(
                self.posted.wait_for(lambda: len(self.calls_to(method)) >= count), timeout)
        return self.calls_to(method)

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.json_response({"ok": False, "error": "invalid_auth"})
        if request.content_type == "application/json":
            params = await request.json()
        else:
            params = dict(await request.post())
        self.calls.append(Call(method, params))
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

    async def start(self) -> None:
        """Listen on a free port of 127.0.0.1."""
        app = web.Application()
        app.router.add_post("/api/{method}", self._handle)
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
        """Stop listening."""
        await self._server.close()


def event_body(event: dict[str, Any], event_id: str, team: str = TEAM_ID) -> bytes:
    """An ``event_callback`` envelope as Slack sends it, serialized once."""
    return json.dumps({
        "token": "XXYYZZverificationtoken", "team_id": team, "context_team_id": team,
        "api_app_id": "A0KRD7HC3", "event": event, "type": "event_callback",
        "event_id": event_id, "event_time": int(float(event.get("ts", "0"))),
        "authorizations": [{"enterprise_id": None, "team_id": team, "user_id": BOT_USER_ID,
                            "is_bot": True, "is_enterprise_install": False}],
        "is_ext_shared_channel": False,
    }).encode()


def slash_command_body(text: str, trigger: str, channel: str = "D0LAN2Q65",
                       user: str = "U061F7AUR", team: str = TEAM_ID) -> bytes:
    """A ``/cloudybot`` slash-command body, form-encoded as Slack posts it."""
    from urllib.parse import urlencode
    return urlencode({
        "token": "verif", "team_id": team, "team_domain": "test", "channel_id": channel,
        "channel_name": "directmessage", "user_id": user, "user_name": "ada",
        "command": "/cloudybot", "text": text, "api_app_id": "A0KRD7HC3",
        "response_url": f"https://hooks.slack.com/commands/{team}/1/x",
        "trigger_id": trigger}).encode()
