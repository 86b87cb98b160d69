"""gateway.http_client against real loopback servers: aiohttp ones for well-behaved HTTP, raw
``asyncio.start_server`` ones for servers that misbehave.

Every server records what it saw (connections, requests); tests synchronize with events, never
with sleeps.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.net.http_client import (
    Connecting,
    ConnectionFailed,
    HTTPClient,
    HTTPClientError,
    Limits,
    ResponseTooLarge,
)
from tests.helpers import unanswered_port

MakeClient = Callable[..., HTTPClient]
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()


@pytest.fixture
async def make_client() -> AsyncIterator[MakeClient]:
    """HTTPClient(...) that is closed when the test ends."""
    clients: list[HTTPClient] = []

    def make(base_url: str, **options: Any) -> HTTPClient:
        client = HTTPClient(base_url, **options)
        clients.append(client)
        return client
    yield make
    for client in clients:
        await client.close()


@asynccontextmanager
async def serve(app: web.Application, host: str = "127.0.0.1",
                ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[int]:
    """``app`` on a free port of ``host``; the port."""
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, 0, ssl_context=ssl_context).start()
        yield int(runner.addresses[0][1])
    finally:
        await runner.cleanup()


class RawServer:
    """A TCP server on 127.0.0.1 whose every connection runs ``handler``; counts connections."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self.connections = 0
        self.port = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._handler(reader, writer)
        except ConnectionError:
            pass  # the client hung up first, as some tests make it
        finally:
            writer.close()
            self._tasks.discard(task)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        """Serve; the base URL (with a /v1 prefix)."""
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{self.port}/v1"
        finally:
            server.close()
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await server.wait_closed()


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes] | None:
    """One request (head, body) from ``reader``; None at a clean end of the connection."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head, await reader.readexactly(length)


def replying(reply: bytes) -> Handler:
    """A raw handler that reads one request and answers ``reply`` as it is, whatever it is."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(reply)
        await writer.drain()
    return handle


def answer(body: bytes, *headers: str, status: str = "200 OK") -> bytes:
    """A response with Content-Length; ``headers`` as ``Name: value`` strings."""
    head = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}",
            "Content-Type: application/json", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def peer_of(request: web.Request) -> object:
    """The client's address and port: one per connection."""
    assert request.transport is not None
    return request.transport.get_extra_info("peername")


def echo_app(peers: list[object]) -> web.Application:
    """POST /v1/echo answers what was sent, its path and headers; records each connection."""
    async def echo(request: web.Request) -> web.Response:
        peers.append(peer_of(request))
        return web.json_response({"path": request.path, "body": (await request.text()),
                                  "headers": dict(request.headers)})
    app = web.Application()
    app.router.add_post("/v1/echo", echo)
    return app


# --- keep-alive ---------------------------------------------------------------------------------
async def test_sequential_requests_share_one_keep_alive_connection(
        make_client: MakeClient) -> None:
    peers: list[object] = []
    async with serve(echo_app(peers)) as port:
        client = make_client(f"http://127.0.0.1:{port}/v1")
        for number in range(5):
            sent = json.dumps({"n": number}).encode()
            async with client.post("/echo", sent) as response:
                assert response.status == 200
                assert json.loads(await response.read())["body"] == sent.decode()
    assert len(peers) == 5
    assert len(set(peers)) == 1


@pytest.mark.parametrize("reply", [
    pytest.param(answer(b"{}", "Connection: close"), id="http-1.1-connection-close"),
    pytest.param(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}", id="http-1.0"),
])
async def test_a_connection_the_server_did_not_keep_alive_is_not_reused(
        make_client: MakeClient, reply: bytes) -> None:
    per_connection: list[int] = []

    async def says_close_but_stays(reader: asyncio.StreamReader,
                                   writer: asyncio.StreamWriter) -> None:
        per_connection.append(0)
        index = len(per_connection) - 1
        while await read_request(reader) is not None:  # until the client hangs up
            per_connection[index] += 1
            writer.write(reply)
            await writer.drain()

    async with RawServer(says_close_but_stays).running() as url:
        client = make_client(url)
        for _ in range(3):
            async with client.post("/x", BODY) as response:
                assert await response.read() == b"{}"
    assert per_connection == [1, 1, 1]


async def test_force_close_from_an_aiohttp_server_is_honoured(make_client: MakeClient) -> None:
    peers: list[object] = []

    async def closing(request: web.Request) -> web.Response:
        peers.append(peer_of(request))
        response = web.json_response({"ok": True})
        response.force_close()  # "Connection: close", then the server hangs up
        return response
    app = web.Application()
    app.router.add_post("/v1/close", closing)
    async with serve(app) as port:
        client = make_client(f"http://127.0.0.1:{port}/v1")
        for _ in range(3):
            async with client.post("/close", BODY) as response:
                assert response.header("Connection") == "close"
                assert json.loads(await response.read()) == {"ok": True}
    assert len(set(peers)) == 3


async def test_a_connection_the_server_closed_while_idle_is_not_reused(
        make_client: MakeClient) -> None:
    requests: list[bytes] = []

    async def answer_once_then_close(reader: asyncio.StreamReader,
                                     writer: asyncio.StreamWriter) -> None:
        request = await read_request(reader)
        assert request is not None
        requests.append(request[1])
        writer.write(answer(b'{"n": %d}' % len(requests)))  # keep-alive, by HTTP/1.1 default
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    server = RawServer(answer_once_then_close)
    async with server.running() as url:
        client = make_client(url)
        for number in (1, 2):
            async with client.post("/x", b"[%d]" % number) as response:
                assert json.loads(await response.read()) == {"n": number}
    assert requests == [b"[1]", b"[2]"]
    assert server.connections == 2


async def test_a_request_on_a_stale_pooled_connection_is_sent_again_on_a_fresh_one(
        make_client: MakeClient) -> None:
    seen: list[tuple[int, bytes]] = []  # (connection number, body)

    async def first_answers_then_drops(reader: asyncio.StreamReader,
                                       writer: asyncio.StreamWriter) -> None:
        number = server.connections
        while (request := await read_request(reader)) is not None:
            seen.append((number, request[1]))
            if number == 1 and len(seen) == 2:
                return  # the second request on the first connection: hang up, no answer
            writer.write(answer(b'{"connection": %d}' % number))
            await writer.drain()

    server = RawServer(first_answers_then_drops)
    async with server.running() as url:
        client = make_client(url)
        async with client.post("/x", b"[1]") as response:
            assert json.loads(await response.read()) == {"connection": 1}
        async with client.post("/x", b"[2]") as response:
            assert json.loads(await response.read()) == {"connection": 2}
    assert seen == [(1, b"[1]"), (1, b"[2]"), (2, b"[2]")]


async def test_a_reused_connection_that_breaks_after_answer_bytes_is_not_sent_again(
        make_client: MakeClient) -> None:
    seen: list[int] = []

    async def second_answer_breaks(reader: asyncio.StreamReader,
                                   writer: asyncio.StreamWriter) -> None:
        while await read_request(reader) is not None:
            seen.append(server.connections)
            if len(seen) == 2:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Le")  # part of a head, then gone
                await writer.drain()
                return
            writer.write(answer(b"{}"))
            await writer.drain()

    server = RawServer(second_answer_breaks)
    async with server.running() as url:
        client = make_client(url)
        async with client.post("/x", BODY) as response:
            assert await response.read() == b"{}"
        with pytest.raises(ConnectionFailed):
            async with client.post("/x", BODY):
                pass
    assert seen == [1, 1]  # one connection, each request once


async def test_close_closes_the_pooled_connections(make_client: MakeClient) -> None:
    ended = asyncio.Event()

    async def answer_until_eof(reader: asyncio.StreamReader,
                               writer: asyncio.StreamWriter) -> None:
        while await read_request(reader) is not None:
            writer.write(answer(b"{}"))
            await writer.drain()
        ended.set()

    async with RawServer(answer_until_eof).running() as url:
        client = make_client(url)
        async with client.post("/x", BODY) as response:
            await response.read()
        assert not ended.is_set()
        await client.close()
        await asyncio.wait_for(ended.wait(), 5)


# --- what is sent -------------------------------------------------------------------------------
async def test_the_request_head_has_host_type_length_accept_agent_and_given_headers(
        make_client: MakeClient) -> None:
    heads: list[bytes] = []
    bodies: list[bytes] = []

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await read_request(reader)
        assert request is not None
        heads.append(request[0])
        bodies.append(request[1])
        writer.write(answer(b"{}"))
        await writer.drain()

    server = RawServer(record)
    async with server.running() as url:
        client = make_client(url + "/", headers={"Authorization": "Bearer sk-1"})
        async with client.post("/chat/completions", BODY, {"X-Extra": "yes"}) as response:
            assert response.status == 200
    request_line, *lines = heads[0].decode().split("\r\n")[:-2]
    headers = {name.lower(): value.strip() for name, _, value in
               (line.partition(":") for line in lines)}
    assert request_line == "POST /v1/chat/completions HTTP/1.1"
    assert headers["host"] == f"127.0.0.1:{server.port}"
    assert headers["content-type"] == "application/json"
    assert headers["content-length"] == str(len(BODY))
    assert headers["accept"] == "*/*"
    assert headers["user-agent"].startswith("cloudybot")
    assert headers["authorization"] == "Bearer sk-1"
    assert headers["x-extra"] == "yes"
    assert bodies == [BODY]


async def test_a_client_of_another_content_type_sends_it(make_client: MakeClient) -> None:
    async def form(request: web.Request) -> web.Response:
        return web.json_response({"type": request.content_type,
                                  "fields": dict(await request.post())})
    app = web.Application()
    app.router.add_post("/v1/form", form)
    async with serve(app) as port:
        client = make_client(f"http://127.0.0.1:{port}/v1",
                             content_type="application/x-www-form-urlencoded")
        async with client.post("/form", b"chat_id=42&text=hi+there") as response:
            assert json.loads(await response.read()) == {
                "type": "application/x-www-form-urlencoded",
                "fields": {"chat_id": "42", "text": "hi there"}}
    with pytest.raises(ValueError):
        HTTPClient("http://example.com", content_type="text/plain\r\nX-Evil: 1")


async def test_a_get_sends_no_body_and_shares_the_keep_alive_connection(
        make_client: MakeClient) -> None:
    heads: list[bytes] = []
    bodies: list[bytes] = []

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (request := await read_request(reader)) is not None:
            heads.append(request[0])
            bodies.append(request[1])
            picture = b"\xff\xd8 picture" * 1000
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(picture), picture))
            await writer.drain()

    server = RawServer(record)
    async with server.running() as url:
        client = make_client(url, headers={"Authorization": "Bearer sk-1"})
        async with client.get("/file/bot1:A/photos/p 1.jpg") as response:
            assert response.status == 200
            assert response.content_type == "image/jpeg"
            assert await response.read() == b"\xff\xd8 picture" * 1000
        async with client.post("/x", BODY) as response:
            await response.read()
        async with client.get("/file/bot1:A/photos/p2.jpg", {"X-Extra": "yes"}) as response:
            await response.read()
    assert server.connections == 1
    assert bodies == [b"", BODY, b""]
    request_line, *lines = heads[0].decode().split("\r\n")[:-2]
    headers = {name.lower(): value.strip() for name, _, value in
               (line.partition(":") for line in lines)}
    assert request_line == "GET /v1/file/bot1:A/photos/p%201.jpg HTTP/1.1"
    assert "content-length" not in headers and "content-type" not in headers
    assert headers["authorization"] == "Bearer sk-1"
    assert heads[1].startswith(b"POST /v1/x HTTP/1.1\r\n")
    assert b"\r\nX-Extra: yes\r\n" in heads[2]


@pytest.mark.parametrize(("url", "headers"), [
    pytest.param("ftp://example.com/v1", {}, id="not-http"),
    pytest.param("http:///v1", {}, id="no-host"),
    pytest.param("http://user:secret@example.com/v1", {}, id="credentials"),
    pytest.param("http://example.com:99999/v1", {}, id="port-out-of-range"),
    pytest.param("http://example.com/v1", {"Authorization": "Bearer a\r\nX-Evil: 1"},
                 id="header-injection"),
    pytest.param("http://example.com/v1", {"Content-Length": "1"}, id="framing-header"),
    pytest.param("http://example.com/v1", {"Bad Name": "x"}, id="bad-header-name"),
])
def test_an_unusable_url_or_header_is_refused_at_once(url: str, headers: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        HTTPClient(url, headers=headers)


# --- bodies -------------------------------------------------------------------------------------
async def test_a_chunked_body_is_read_whole_and_the_connection_reused(
        make_client: MakeClient) -> None:
    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await read_request(reader) is not None:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                         b"Content-Type: application/json\r\n\r\n"
                         b"5\r\n{\"a\":\r\n3\r\n 1}\r\n0\r\n\r\n")
            await writer.drain()

    server = RawServer(chunked)
    async with server.running() as url:
        client = make_client(url)
        for _ in range(2):
            async with client.post("/x", BODY) as response:
                assert await response.read() == b'{"a": 1}'
    assert server.connections == 1


async def test_a_body_without_length_is_read_until_the_server_closes(
        make_client: MakeClient) -> None:
    async def until_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
        await writer.drain()
        writer.write(b'{"whole": ')
        await writer.drain()
        writer.write(b"true}")

    server = RawServer(until_close)
    async with server.running() as url:
        client = make_client(url)
        for _ in range(2):
            async with client.post("/x", BODY) as response:
                assert response.content_type == "application/json"
                assert await response.read() == b'{"whole": true}'
    assert server.connections == 2  # a body framed by the close: never reused


async def test_informational_heads_are_skipped(make_client: MakeClient) -> None:
    async def early_hints(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
                     + answer(b"{}", "X-Final: yes"))
        await writer.drain()

    async with RawServer(early_hints).running() as url:
        client = make_client(url)
        async with client.post("/x", BODY) as response:
            assert (response.status, response.header("x-final"), response.header("link")) == (
                200, "yes", None)
            assert await response.read() == b"{}"


async def test_headers_are_looked_up_in_any_case_and_repeats_are_joined(
        make_client: MakeClient) -> None:
    async def headers(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer(b"{}", "RETRY-after: 7", "X-Twice: a", "x-twice: b",
                            status="429 Too Many Requests"))
        await writer.drain()

    async with RawServer(headers).running() as url:
        client = make_client(url)
        async with client.post("/x", BODY) as response:
            assert response.status == 429
            assert response.header("Retry-After") == response.headers["retry-after"] == "7"
            assert response.header("X-TWICE") == "a, b"
            assert response.content_type == "application/json"


# --- limits -------------------------------------------------------------------------------------
@pytest.mark.parametrize("framing", ["length", "chunked", "close"])
async def test_a_body_larger_than_the_limit_is_an_error(make_client: MakeClient,
                                                         framing: str) -> None:
    async def big(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        body = b"x" * 5000
        if framing == "length":
            writer.write(answer(body))
        elif framing == "chunked":
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                         + b"1388\r\n" + body + b"\r\n0\r\n\r\n")
        else:
            writer.write(b"HTTP/1.1 200 OK\r\n\r\n" + body)
        await writer.drain()

    async with RawServer(big).running() as url:
        client = make_client(url, limits=Limits(body=4096))
        async with client.post("/x", BODY) as response:
            with pytest.raises(ResponseTooLarge):
                await response.read()


async def test_a_head_larger_than_the_limit_is_an_error(make_client: MakeClient) -> None:
    async def huge_head(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n")
        for number in range(200):  # 200 x ~1 KB of headers, never ending
            writer.write(b"X-Filler-%d: %s\r\n" % (number, b"f" * 1000))
            await writer.drain()
        await reader.read()

    async with RawServer(huge_head).running() as url:
        client = make_client(url, limits=Limits(head=64 * 1024))
        with pytest.raises(ResponseTooLarge):
            async with client.post("/x", BODY):
                pass


async def test_a_line_longer_than_the_limit_is_an_error_and_the_next_request_works(
        make_client: MakeClient) -> None:
    async def long_line(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        writer.write(b"a\r\ndata: ok\n\n\r\n")
        for _ in range(4):  # 4 x 600 bytes of one line, no end in sight
            writer.write(b"258\r\n" + b"z" * 600 + b"\r\n")
        await writer.drain()
        await reader.read()  # until the client hangs up

    server = RawServer(long_line)
    async with server.running() as url:
        client = make_client(url, limits=Limits(line=1024))
        async with client.post("/x", BODY) as response:
            lines = response.lines()
            assert [await anext(lines), await anext(lines)] == [b"data: ok", b""]
            with pytest.raises(ResponseTooLarge):
                await anext(lines)
        async with client.post("/x", BODY) as response:
            assert response.status == 200
    assert server.connections == 2


# --- streaming ----------------------------------------------------------------------------------
async def test_sse_lines_arrive_one_by_one_as_the_server_sends_them(
        make_client: MakeClient) -> None:
    received = [asyncio.Event() for _ in range(3)]

    async def events(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for number, seen in enumerate(received):
            await response.write(b"data: %d\r\n\r\n" % number)
            await seen.wait()  # the next line only once the client has this one
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/stream", events)
    async with serve(app) as port:
        client = make_client(f"http://127.0.0.1:{port}/v1")
        got: list[bytes] = []
        async with asyncio.timeout(10), client.post("/stream", BODY) as response:
            assert response.content_type == "text/event-stream"
            async for line in response.lines():
                got.append(line)
                if line.startswith(b"data: ") and line[6:].isdigit():
                    received[int(line[6:])].set()
    assert got == [b"data: 0", b"", b"data: 1", b"", b"data: 2", b"", b"data: [DONE]", b""]


async def test_a_reader_that_lags_pauses_the_socket_and_then_gets_every_line(
        make_client: MakeClient) -> None:
    all_written = asyncio.Event()
    line = b"data: " + b"y" * (16 * 1024 - 7) + b"\n"
    total = 96 * 1024 * 1024  # well beyond what socket buffers hold (tcp_rmem max is 32 MiB)

    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
        for _ in range(total // (len(line) * 4)):
            writer.write(line * 4)
            await writer.drain()
        all_written.set()

    async with RawServer(flood).running() as url:
        client = make_client(url)  # 96 MiB read by lines: no total limit, one line at a time
        async with client.post("/x", BODY) as response:
            # Not reading: a client that kept reading into memory would take all 96 MiB at
            # loopback speed; one that pauses holds the server back at its socket buffers.
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(all_written.wait(), 0.5)
            count = 0
            async for got in response.lines():
                assert got == line[:-1]
                count += 1
    assert all_written.is_set()
    assert count == total // len(line)


# --- broken servers -----------------------------------------------------------------------------
@pytest.mark.parametrize("reply", [
    pytest.param(b"garbage\r\n\r\n", id="not-http"),
    pytest.param(b"HTTP/1.1 2x0 OK\r\n\r\n", id="bad-status"),
    pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
                 id="two-lengths"),
    pytest.param(b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n", id="bad-header"),
    pytest.param(b"HTTP/1.1 200 OK\r\nContent-Type: applic", id="cut-in-head"),
    pytest.param(b"", id="nothing"),
    pytest.param(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade"
                 b"\r\n\r\n", id="upgrade"),
    pytest.param(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 0\r\n\r\n",
                 id="encoded-though-not-asked"),
])
async def test_a_malformed_or_cut_head_is_connection_failed(make_client: MakeClient,
                                                            reply: bytes) -> None:
    async with RawServer(replying(reply)).running() as url:
        client = make_client(url)
        with pytest.raises(ConnectionFailed):
            async with client.post("/x", BODY):
                pass


@pytest.mark.parametrize("reply", [
    pytest.param(answer(b"{}")[:-1], id="cut-in-length-body"),
    pytest.param(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabc",
                 id="cut-in-chunk"),
    pytest.param(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                 id="bad-chunk-size"),
])
async def test_a_cut_or_malformed_body_is_connection_failed(make_client: MakeClient,
                                                            reply: bytes) -> None:
    async with RawServer(replying(reply)).running() as url:
        client = make_client(url)
        async with client.post("/x", BODY) as response:
            with pytest.raises(ConnectionFailed):
                await response.read()


async def test_an_unreachable_server_is_connection_failed(make_client: MakeClient) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    client = make_client(f"http://127.0.0.1:{closed_port}/v1")
    with pytest.raises(ConnectionFailed):
        async with client.post("/x", BODY):
            pass


async def test_a_connection_not_made_within_connect_timeout_fails_at_once(
        make_client: MakeClient) -> None:
    with unanswered_port() as port:
        client = make_client(f"http://127.0.0.1:{port}/v1", connecting=Connecting(timeout=0.2))
        started = asyncio.get_running_loop().time()
        with pytest.raises(ConnectionFailed, match=r"no connection within 0\.2 s") as failure:
            async with client.post("/x", BODY):
                pass
        assert isinstance(failure.value.__cause__, TimeoutError)
        assert asyncio.get_running_loop().time() - started < 2


# --- timeouts and cancellation ------------------------------------------------------------------
class HalfAnswer:
    """Answers the first connection's request with half a body, then waits for the client to
    hang up; answers later connections whole."""

    def __init__(self) -> None:
        self.half_sent = asyncio.Event()
        self.first_closed_by_client = asyncio.Event()
        self.server = RawServer(self.handle)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = self.server.connections == 1
        while await read_request(reader) is not None:
            if first:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"h" * 10)
                await writer.drain()
                self.half_sent.set()
                await reader.read()  # b"" once the client closed its end
                self.first_closed_by_client.set()
                return
            writer.write(answer(b'{"fresh": true}'))
            await writer.drain()


async def test_a_timeout_mid_body_closes_the_connection_and_the_next_request_is_fresh(
        make_client: MakeClient) -> None:
    half = HalfAnswer()
    async with half.server.running() as url:
        client = make_client(url)
        loop = asyncio.get_running_loop()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(None) as deadline, client.post("/x", BODY) as response:
                await half.half_sent.wait()
                deadline.reschedule(loop.time())  # time is up now, while the body is half in
                await response.read()
        await asyncio.wait_for(half.first_closed_by_client.wait(), 5)
        async with client.post("/x", BODY) as response:
            assert await response.read() == b'{"fresh": true}'
    assert half.server.connections == 2


async def test_a_cancelled_read_closes_the_connection_and_the_next_request_is_fresh(
        make_client: MakeClient) -> None:
    half = HalfAnswer()
    async with half.server.running() as url:
        client = make_client(url)

        async def read_all() -> bytes:
            async with client.post("/x", BODY) as response:
                return await response.read()
        reading = asyncio.ensure_future(read_all())
        await half.half_sent.wait()
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading
        await asyncio.wait_for(half.first_closed_by_client.wait(), 5)
        async with client.post("/x", BODY) as response:
            assert await response.read() == b'{"fresh": true}'
    assert half.server.connections == 2


async def test_a_response_left_unread_is_not_reused(make_client: MakeClient) -> None:
    half = HalfAnswer()
    async with half.server.running() as url:
        client = make_client(url)
        async with client.post("/x", BODY) as response:
            assert response.status == 200
        await asyncio.wait_for(half.first_closed_by_client.wait(), 5)
        async with client.post("/x", BODY) as response:
            assert await response.read() == b'{"fresh": true}'
    assert half.server.connections == 2


async def test_a_response_used_after_its_block_is_refused(make_client: MakeClient) -> None:
    peers: list[object] = []
    async with serve(echo_app(peers)) as port:
        client = make_client(f"http://127.0.0.1:{port}/v1")
        async with client.post("/echo", BODY) as response:
            await response.read()
        with pytest.raises(RuntimeError):
            await response.read()


# --- TLS and IPv6 -------------------------------------------------------------------------------
def certificate_files(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a certificate it signed for localhost and 127.0.0.1: (ca, cert, key) files."""
    now = datetime.datetime.now(datetime.UTC)

    def build(subject: x509.Name, issuer: x509.Name, public: ec.EllipticCurvePublicKey,
              signer: ec.EllipticCurvePrivateKey, ca: bool) -> x509.Certificate:
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
                   .public_key(public).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
                   .add_extension(x509.SubjectKeyIdentifier.from_public_key(public),
                                  critical=False))
        if ca:
            builder = builder.add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        else:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False).add_extension(
                x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                critical=False).add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()),
                critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cloudybot test CA")])
    ca = build(ca_name, ca_name, ca_key.public_key(), ca_key, ca=True)
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = build(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]), ca_name,
                 key.public_key(), ca_key, ca=False)
    paths = directory / "ca.pem", directory / "cert.pem", directory / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


async def test_https_with_the_servers_ca_works_and_keeps_the_connection_alive(
        make_client: MakeClient, tmp_path: Path) -> None:
    ca, cert, key = certificate_files(tmp_path)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    peers: list[object] = []
    async with serve(echo_app(peers), ssl_context=server_context) as port:
        for host in ("localhost", "127.0.0.1"):
            client = make_client(f"https://{host}:{port}/v1",
                                 connecting=Connecting(
                                     ssl.create_default_context(cafile=str(ca))))
            for _ in range(3):
                async with client.post("/echo", BODY) as response:
                    assert json.loads(await response.read())["body"] == BODY.decode()
    assert len(peers) == 6
    assert len(set(peers)) == 2  # one connection per client


async def test_https_refuses_a_certificate_the_context_does_not_trust(
        make_client: MakeClient, tmp_path: Path) -> None:
    _, cert, key = certificate_files(tmp_path)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    peers: list[object] = []
    async with serve(echo_app(peers), ssl_context=server_context) as port:
        client = make_client(f"https://localhost:{port}/v1")  # the system's CAs only
        with pytest.raises(ConnectionFailed, match="certificate"):
            async with client.post("/echo", BODY):
                pass
    assert peers == []


def ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not ipv6_loopback(), reason="this machine has no IPv6 loopback (::1)")
async def test_an_ipv6_literal_url_connects_and_sends_a_bracketed_host(
        make_client: MakeClient) -> None:
    peers: list[object] = []
    async with serve(echo_app(peers), host="::1") as port:
        client = make_client(f"http://[::1]:{port}/v1")
        async with client.post("/echo", BODY) as response:
            echoed = json.loads(await response.read())
    assert echoed["headers"]["Host"] == f"[::1]:{port}"
    assert echoed["path"] == "/v1/echo"


# --- property: whatever the server sends, only the module's errors ------------------------------
HEADER_BYTES = st.binary(max_size=40) | st.sampled_from([
    b"Content-Length", b"Transfer-Encoding", b"chunked", b"Connection", b"close", b"-1",
    b"99999999999999999999", b"\r\n", b"\n", b"\x00", b":", b"gzip", b"identity"])


@st.composite
def responses(draw: st.DrawFn) -> bytes:
    """Bytes a server might answer: noise, or a head with arbitrary headers and body."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=300))
    status = draw(st.sampled_from([b"200 OK", b"204 No Content", b"100 Continue", b"429 x",
                                   b"999 odd", b"200", b"abc"]))
    headers = draw(st.lists(st.tuples(HEADER_BYTES, HEADER_BYTES), max_size=6))
    head = b"HTTP/1.1 " + status + b"\r\n" + b"".join(
        name + b": " + value + b"\r\n" for name, value in headers)
    return head + b"\r\n" + draw(st.binary(max_size=200))


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reply=responses(), as_lines=st.booleans())
async def test_any_answer_from_the_server_is_a_response_or_an_http_client_error(
        reply: bytes, as_lines: bool) -> None:
    async with RawServer(replying(reply)).running() as url:
        client = HTTPClient(url, limits=Limits(body=100, line=50, head=200))
        try:
            async with asyncio.timeout(10), client.post("/x", BODY) as response:
                assert 200 <= response.status <= 999
                if as_lines:
                    async for line in response.lines():
                        assert b"\n" not in line
                else:
                    assert len(await response.read()) <= 100
        except HTTPClientError:
            pass
        finally:
            await client.close()


def test_the_errors_form_one_hierarchy() -> None:
    assert issubclass(ConnectionFailed, HTTPClientError)
    assert issubclass(ResponseTooLarge, HTTPClientError)
    assert not issubclass(HTTPClientError, OSError | ValueError)
