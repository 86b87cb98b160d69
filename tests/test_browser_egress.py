"""The browser's egress proxy on its own, spoken to by a real HTTP client (aiohttp) and a raw
socket: what it forwards, what it refuses, and how it answers requests it does not take."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from plugins.browser.egress import EgressProxy
from tests.fakes.website import Website


async def proxied_get(proxy: EgressProxy, url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(
            url, proxy=f"http://127.0.0.1:{proxy.port}", allow_redirects=False) as response:
        return response.status, await response.text()


async def raw_exchange(proxy: EgressProxy, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(request)
    await writer.drain()
    answer = await reader.read()
    writer.close()
    return answer


async def test_loopback_is_refused_for_plain_http_and_for_tunnels(website: Website) -> None:
    proxy = EgressProxy(allow_private=False)
    await proxy.start()
    try:
        status, text = await proxied_get(proxy, f"{website.base}/table")
        assert status == 403 and "refused by the gateway: 127.0.0.1 is 127.0.0.1" in text
        tunnel = await raw_exchange(
            proxy, f"CONNECT 127.0.0.1:{website.port} HTTP/1.1\r\n\r\n".encode())
        assert tunnel.startswith(b"HTTP/1.1 403 Forbidden")
        metadata = await raw_exchange(
            proxy, b"GET http://169.254.169.254/latest/ HTTP/1.1\r\nHost: x\r\n\r\n")
        assert metadata.startswith(b"HTTP/1.1 403 Forbidden")
    finally:
        await proxy.close()
    assert website.hits == [] and proxy.refused == 3


@pytest.mark.parametrize("answer", ["192.0.0.192", "64:ff9b::7f00:1", "2002:7f00:1::",
                                    "::7f00:1", "fec0::1", "::ffff:127.0.0.1"])
async def test_a_host_resolving_to_a_special_form_is_refused_at_connect(
        website: Website, answer: str) -> None:
    asked: list[str] = []

    async def resolve(host: str, port: int) -> list[str]:
        asked.append(host)
        return [answer]

    proxy = EgressProxy(allow_private=False, resolve=resolve)
    await proxy.start()
    try:
        status, text = await proxied_get(proxy, f"http://site.test:{website.port}/table")
        tunnel = await raw_exchange(
            proxy, f"CONNECT site.test:{website.port} HTTP/1.1\r\n\r\n".encode())
    finally:
        await proxy.close()
    assert status == 403 and f"refused by the gateway: site.test is {answer}, " in text
    assert tunnel.startswith(b"HTTP/1.1 403 Forbidden")
    assert asked == ["site.test"] * 2 and proxy.refused == 2 and website.hits == []


async def test_allowed_requests_are_forwarded_one_per_connection(website: Website) -> None:
    proxy = EgressProxy(allow_private=True)
    await proxy.start()
    try:
        status, text = await proxied_get(proxy, f"{website.base}/table")
        assert status == 200 and "Marseille" in text
        tunnel = await raw_exchange(proxy, (
            f"CONNECT 127.0.0.1:{website.port} HTTP/1.1\r\n\r\n"
            f"GET /table HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").encode())
        assert tunnel.startswith(b"HTTP/1.1 200 Connection Established\r\n\r\nHTTP/1.1 200")
    finally:
        await proxy.close()
    assert website.hits == ["/table", "/table"]
    assert website.server.open_connections() == 0  # Connection: close, nothing kept


@pytest.mark.parametrize("request_bytes", [
    b"GET https://example.com/ HTTP/1.1\r\n\r\n",  # https must come as CONNECT
    b"GET /relative HTTP/1.1\r\n\r\n",
    b"CONNECT example.com:99999 HTTP/1.1\r\n\r\n",
    b"NONSENSE\r\n\r\n",
    b"\xff\xfe\xfd garbage\r\n\r\n",
])
async def test_requests_it_does_not_forward_are_answered_400(request_bytes: bytes) -> None:
    proxy = EgressProxy(allow_private=True)
    await proxy.start()
    try:
        answer = await raw_exchange(proxy, request_bytes)
    finally:
        await proxy.close()
    assert answer.startswith(b"HTTP/1.1 400 Bad Request")


async def test_closing_ends_connections_waiting_for_dns() -> None:
    started = asyncio.Event()

    async def never(host: str, port: int) -> list[str]:
        started.set()
        await asyncio.Event().wait()
        return []

    proxy = EgressProxy(allow_private=False, resolve=never)
    await proxy.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(b"GET http://slow.test/ HTTP/1.1\r\nHost: slow.test\r\n\r\n")
    await started.wait()
    await asyncio.wait_for(proxy.close(), 5)
    assert await reader.read() == b""  # cut, not left hanging
    writer.close()
