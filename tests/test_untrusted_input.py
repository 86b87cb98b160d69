"""SPEC §11 "No input yields a 500" and "Files at rest": header bytes that are not UTF-8,
integers too long to parse, JSON nested too deep, bodies that stall, malformed requests in the
logs, and the modes of everything in the data dir.

Requests that a normal client refuses to send go over a raw socket to the test server.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import logging
import os
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gateway import Channel, hookimpl
from gateway.accounts.secrets import KEY_FILE_NAME
from gateway.plugins.manager import PluginManager
from gateway.store.sqlite import SQLiteStore
from gateway.testing.fake_llm import FakeLLM
from gateway.testing.slack import SIGNING_SECRET, sign
from gateway.testing.telegram import SECRET as TELEGRAM_SECRET
from tests.conftest import Harness
from tests.helpers import assert_json_error

StartGateway = Callable[..., Awaitable[Harness]]

NOT_UTF8 = b"\xff\xfe"
HUGE_INT = b"1" * 5000
# Sample values for path parameters and the query parameters handlers read, so that a request
# gets past them to whatever it is meant to test.
PATH_VALUES = {"thread_id": "t1", "name": "s1", "webhook_id": "wh_" + "0" * 24, "user_id": "bob",
               "job_id": "job_" + "0" * 16}
QUERY = "?threadId=t1&key=k&site=example.com"


# --- raw HTTP -----------------------------------------------------------------------------
@dataclass
class RawResponse:
    """What came back on the socket (the server closed it after one response)."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json_error(self) -> dict[str, Any]:
        """The SPEC's error object, checked: a JSON body ``{"error": {"code", "message"}}``."""
        assert self.headers.get("content-type", "").startswith("application/json"), self
        error: dict[str, Any] = json.loads(self.body)["error"]
        assert isinstance(error["code"], str) and error["code"]
        assert isinstance(error["message"], str) and error["message"]
        return error


def http_request(method: str, path: str, headers: list[tuple[bytes, bytes]] | None = None,
                 body: bytes = b"", *, content_length: int | None = None) -> bytes:
    """One HTTP/1.1 request as bytes, header values sent exactly as given."""
    lines = [f"{method} {path} HTTP/1.1".encode(), b"Host: test", b"Connection: close"]
    lines += [name + b": " + value for name, value in headers or []]
    if body or content_length is not None:
        length = len(body) if content_length is None else content_length
        lines.append(b"Content-Length: " + str(length).encode())
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def raw_exchange(harness: Harness, data: bytes, timeout: float = 5.0) -> RawResponse:
    """Write ``data`` and read until the server closes the connection (within ``timeout``).

    An event stream (``/api/jobs/events``) stays open by design: for one, only the status and
    headers are read."""
    server = harness.client.server
    assert server.host is not None and server.port is not None
    reader, writer = await asyncio.open_connection(server.host, server.port)
    try:
        writer.write(data)
        await writer.drain()
        received = await asyncio.wait_for(_read_response(reader), timeout)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    head, _, body = received.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return RawResponse(int(status_line.split(" ")[1]), headers, body)


async def _read_response(reader: asyncio.StreamReader) -> bytes:
    """The whole response, or only its head when it is an event stream."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as closed:
        return closed.partial
    if b"content-type: text/event-stream" in head.lower():
        return head
    return head + await reader.read()


def served_routes(app: web.Application) -> list[tuple[str, str]]:
    """``(method, path)`` of every route the app serves, path parameters filled in."""
    routes = []
    for route in app.router.routes():
        if route.method == "HEAD":  # added for every GET
            continue
        info = route.resource.get_info() if route.resource is not None else {}
        path = info["path"] if "path" in info else info["formatter"].format_map(PATH_VALUES)
        routes.append((route.method, path))
    return sorted(set(routes))


def protected(routes: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(method, path) for method, path in routes
            if path == "/chat" or path.startswith("/api/")]


# --- header bytes that are not UTF-8 -----------------------------------------------------
async def test_non_utf8_bearer_token_is_401_on_every_authenticated_route(
        harness: Harness) -> None:
    await harness.user()
    routes = protected(served_routes(harness.client.app))
    assert ("POST", "/chat") in routes and ("PUT", "/api/specialists/s1") in routes
    for method, path in routes:
        response = await raw_exchange(harness, http_request(
            method, path + QUERY, [(b"Authorization", b"Bearer " + NOT_UTF8)]))
        assert response.status == 401, (method, path, response)
        assert response.json_error()["code"] == "unauthorized"


async def test_non_utf8_telegram_secret_is_403(tg: Harness) -> None:
    body = json.dumps({"update_id": 1}).encode()
    response = await raw_exchange(tg, http_request(
        "POST", "/telegram/webhook", [(b"X-Telegram-Bot-Api-Secret-Token", b"\xff"),
                                      (b"Content-Type", b"application/json")], body))
    assert response.status == 403, response
    assert response.json_error()["code"] == "forbidden"
    # The real secret still works: only the undecodable header was set aside.
    response = await raw_exchange(tg, http_request(
        "POST", "/telegram/webhook", [(b"X-Telegram-Bot-Api-Secret-Token",
                                       TELEGRAM_SECRET.encode()),
                                      (b"Content-Type", b"application/json")], body))
    assert response.status == 200, response


async def test_non_utf8_slack_signature_is_401(slack: Harness) -> None:
    body = b'{"type": "url_verification", "challenge": "c"}'
    headers = [(name.encode(), value.encode()) for name, value in
               sign(SIGNING_SECRET, body).items() if name != "X-Slack-Signature"]
    response = await raw_exchange(slack, http_request(
        "POST", "/slack/events", [*headers, (b"X-Slack-Signature", b"v0=" + NOT_UTF8)], body))
    assert response.status == 401, response
    response.json_error()


async def test_text_a_handler_cannot_encode_is_400_not_500(pm: PluginManager,
                                                           start_gateway: StartGateway) -> None:
    """The generic guard: a plugin's route tripping on text that is not UTF-8."""
    class Strict(Channel):
        name = "strict"

        def routes(self) -> list[web.RouteDef]:
            return [web.get("/strict", self.strict)]

        async def strict(self, request: web.Request) -> web.Response:
            "\udcff".encode()  # what a header decoded with surrogateescape does
            return web.json_response({})

    class StrictPlugin:
        @hookimpl
        def register_channels(self, host: Any) -> list[Channel]:
            return [Strict()]

    pm.register(StrictPlugin(), name="strict")
    harness = await start_gateway()
    response = await raw_exchange(harness, http_request("GET", "/strict"))
    assert response.status == 400, response
    assert response.json_error()["code"] == "invalid_encoding"


# --- JSON Python cannot parse -----------------------------------------------------------------
JSON_ROUTES = [
    pytest.param("POST", "/chat", id="chat"),
    pytest.param("PUT", "/api/user/memory?threadId=t1", id="memory"),
    pytest.param("PUT", "/api/user/browser-credentials", id="browser-credentials"),
    pytest.param("PUT", "/api/specialists/s1", id="specialist"),
]
UNPARSABLE_JSON = [
    pytest.param(b'{"threadId": "t1", "message": "hi", "n": ' + HUGE_INT + b"}", id="huge-int"),
    pytest.param(b'{"key": -' + HUGE_INT + b"}", id="huge-negative-int"),
    pytest.param(b'{"a": ' * 100_000, id="nested-objects"),
    pytest.param(b"[" * 100_000, id="nested-arrays"),
]


@pytest.mark.parametrize(("method", "path"), JSON_ROUTES)
@pytest.mark.parametrize("body", UNPARSABLE_JSON)
async def test_json_python_cannot_parse_is_400(harness: Harness, fake_llm: FakeLLM,
                                               method: str, path: str, body: bytes) -> None:
    auth = await harness.user()
    response = await harness.client.request(method, path, data=body, headers={
        **auth, "Content-Type": "application/json"})
    text = await response.text()
    assert response.status == 400, text
    assert json.loads(text)["error"]["code"] == "invalid_json"
    assert fake_llm.requests == []


# --- malformed bodies -------------------------------------------------------------------------
async def test_body_aiohttp_cannot_decode_is_400_not_500(harness: Harness) -> None:
    auth = await harness.user()
    token = auth["Authorization"].encode()
    bad_gzip = b"\x1f\x8b\x08\x00not really gzip"
    response = await raw_exchange(harness, http_request(
        "POST", "/chat", [(b"Authorization", token), (b"Content-Type", b"application/json"),
                          (b"Content-Encoding", b"gzip")], bad_gzip))
    assert response.status == 400, response
    assert response.json_error()["code"] == "invalid_body"
    good = gzip.compress(b'{"threadId": "t1", "message": "hi"}')
    response = await raw_exchange(harness, http_request(
        "POST", "/chat", [(b"Authorization", token), (b"Content-Type", b"application/json"),
                          (b"Content-Encoding", b"gzip")], good))
    assert response.status == 200, response


# --- bodies that stall ------------------------------------------------------------------------
async def test_stalled_body_is_cut_with_408_and_the_connection_closed(
        start_slack: StartGateway) -> None:
    harness = await start_slack(body_timeout_seconds=0.5)
    auth = await harness.user()
    token = auth["Authorization"].encode()
    for path, headers in [("/slack/events", [(b"Content-Type", b"application/json")]),
                          ("/chat", [(b"Authorization", token)]),
                          ("/healthz", [])]:
        method = "GET" if path == "/healthz" else "POST"
        # Content-Length says 100, ten bytes come, then nothing: the server must not wait on
        # (the client gives up after 3 s, six times the body timeout: no 408 by then fails).
        response = await raw_exchange(harness, http_request(
            method, path, headers, b'{"a": "bc"', content_length=100), timeout=3.0)
        assert response.status == 408, (path, response)
        assert response.json_error()["code"] == "body_timeout"
        assert response.headers.get("connection", "").lower() == "close"


async def test_body_that_arrives_is_read_once_and_given_to_the_handler(
        slack: Harness) -> None:
    """The middleware reads the body first; the channel's own ``request.read()`` still sees it."""
    body = b'{"type": "url_verification", "challenge": "abc123"}'
    response = await slack.client.post("/slack/events", data=body,
                                       headers=sign(SIGNING_SECRET, body))
    assert response.status == 200
    assert "abc123" in await response.text()


# --- what aiohttp logs about requests its parser refuses ---------------------------------------
@pytest.mark.parametrize("value", [
    pytest.param(b"Bearer cb_TOPSECRETTOKEN\x00tail", id="nul-byte"),
    pytest.param(b"Bearer cb_TOPSECRETTOKEN\x01tail", id="control-char"),
    pytest.param(b"Bearer cb_TOPSECRETTOKEN\x7ftail", id="del-char"),
])
async def test_refused_header_bytes_stay_out_of_the_logs(harness: Harness,
                                                         caplog: pytest.LogCaptureFixture,
                                                         value: bytes) -> None:
    caplog.set_level(logging.DEBUG)
    response = await raw_exchange(harness, http_request(
        "POST", "/chat", [(b"Authorization", value)], b"{}"))
    assert response.status == 400
    assert "TOPSECRETTOKEN" not in caplog.text
    for record in caplog.records:
        assert "TOPSECRETTOKEN" not in record.getMessage()
        assert record.exc_info is None or "TOPSECRETTOKEN" not in str(record.exc_info[1])
    assert any("malformed HTTP request" in record.getMessage() for record in caplog.records)


# --- files at rest ----------------------------------------------------------------------------
def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.sqlite_only
async def test_data_dir_and_everything_in_it_are_private(harness: Harness) -> None:
    settings = harness.gateway.settings
    auth = await harness.user()
    assert (await harness.chat(auth, "hello")).status == 200
    await harness.gateway.drain()
    session = harness.gateway.sessions.path_for("alice--t1")
    assert session.exists()
    assert mode(session) == 0o600
    database = settings.database_path
    wal = database.with_name(database.name + "-wal")
    shm = database.with_name(database.name + "-shm")
    assert wal.exists() and shm.exists()
    for path in (database, wal, shm, settings.data_dir / KEY_FILE_NAME):
        assert mode(path) == 0o600, path
    response = await harness.client.post("/api/threads/t1/clear", headers=auth)
    assert response.status == 200
    [archived] = harness.gateway.sessions.archives_of("alice--t1")
    assert mode(archived) == 0o600
    for directory in (settings.data_dir, settings.sessions_dir, settings.sessions_dir / "archive"):
        assert mode(directory) == 0o700, directory


@pytest.mark.sqlite_only
async def test_loose_modes_left_by_an_older_version_are_tightened_at_start(
        start_gateway: StartGateway, data_dir: Path) -> None:
    sessions = data_dir / "sessions"
    archive = sessions / "archive"
    archive.mkdir(parents=True)
    store = SQLiteStore(data_dir / "cloudybot.sqlite3")
    await store.open()
    await store.close()
    database = data_dir / "cloudybot.sqlite3"
    wal = database.with_name(database.name + "-wal")
    wal.write_bytes(b"")  # as a crash would leave it
    key = data_dir / KEY_FILE_NAME
    key.write_bytes(b"A" * 43 + b"=\n")
    for directory in (data_dir, sessions, archive):
        os.chmod(directory, 0o755)
    for path in (database, wal, key):
        os.chmod(path, 0o644)

    harness = await start_gateway()

    settings = harness.gateway.settings
    assert settings.data_dir == data_dir
    for directory in (data_dir, sessions, archive):
        assert mode(directory) == 0o700, directory
    for path in (database, wal, key):
        assert mode(path) == 0o600, path


@pytest.mark.parametrize("body", [
    b'{"threadId": "t1", "message": "\\ud800 broken"}',
    b'{"threadId": "t1", "message": "ok", "specialist": "\\udfff"}',
])
async def test_lone_surrogates_in_chat_are_400_not_500(harness: Harness, fake_llm: FakeLLM,
                                                       body: bytes) -> None:
    auth = await harness.user()
    response = await harness.client.post("/chat", data=body, headers={
        **auth, "Content-Type": "application/json"})
    await assert_json_error(response, 400)
    assert fake_llm.requests == []


async def test_lone_surrogates_in_memory_and_specialists_are_400(harness: Harness) -> None:
    auth = await harness.user()
    headers = {**auth, "Content-Type": "application/json"}
    response = await harness.client.put("/api/user/memory?threadId=t1", headers=headers,
                                        data=b'{"key": "k", "value": "\\ud800"}')
    await assert_json_error(response, 400)
    response = await harness.client.put("/api/specialists/s", headers=headers,
                                        data=b'{"instructions": "\\ud800"}')
    await assert_json_error(response, 400)
