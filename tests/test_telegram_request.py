"""channels/telegram/request.py: python-telegram-bot's requests on the gateway's HTTP client,
against the fake Bot API on 127.0.0.1 through the real PTB (Bot, ExtBot, AIORateLimiter)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from telegram import Bot, MessageEntity, ReplyParameters
from telegram.error import NetworkError, RetryAfter, TimedOut
from telegram.ext import AIORateLimiter, ExtBot
from telegram.request import HTTPXRequest

from channels.telegram.adapter import TelegramChannel, retry_after_seconds
from channels.telegram.request import GatewayRequest, bot_api_requests
from gateway.testing.telegram import TOKEN, FakeTelegramChats, loads_param, sent_entities
from tests.conftest import Harness
from tests.helpers import unanswered_port, until

CHAT = 777000111


class SlowTelegram(FakeTelegramChats):
    """The fake, with a method that answers only after a second (``slowMethod``)."""

    async def _slowMethod(self, params: dict[str, Any]) -> web.Response:
        await asyncio.sleep(1)
        return self._ok(True)


@pytest.fixture
async def slow_telegram() -> AsyncIterator[SlowTelegram]:
    server = SlowTelegram(TOKEN)
    await server.start()
    yield server
    await server.close()


def file_base(base_url: str) -> str:
    return base_url.removesuffix("/bot") + "/file/bot"


@contextlib.asynccontextmanager
async def bot_on(base_url: str, request: Any = None, **options: Any) -> AsyncIterator[ExtBot[Any]]:
    """An initialized ExtBot on ``base_url`` whose requests are GatewayRequests (or
    ``request``), shut down after."""
    bot: ExtBot[Any] = ExtBot(TOKEN, base_url=base_url, base_file_url=file_base(base_url),
                              request=request or GatewayRequest(),
                              get_updates_request=GatewayRequest(), **options)
    await bot.initialize()
    try:
        yield bot
    finally:
        await bot.shutdown()




async def send_rich(bot: Bot) -> None:
    await bot.send_message(CHAT, "bold and a reply ✓", message_thread_id=7,
                           entities=[MessageEntity(MessageEntity.BOLD, 0, 4)],
                           reply_parameters=ReplyParameters(88, allow_sending_without_reply=True))


# --- what goes over the wire ----------------------------------------------------------------------
async def test_the_channel_sends_every_call_through_the_gateway_request(
        tg: Harness, fake_telegram: FakeTelegramChats) -> None:
    channel = tg.gateway.channels["telegram"]
    assert isinstance(channel, TelegramChannel) and channel.bot is not None
    assert isinstance(channel.bot.request, GatewayRequest)
    assert isinstance(channel.bot._request[0], GatewayRequest)  # getUpdates' own
    assert fake_telegram.calls[0].method == "getMe"


async def test_a_call_is_sent_as_httpx_sends_it(fake_telegram: FakeTelegramChats) -> None:
    async with bot_on(fake_telegram.base_url) as bot:
        await send_rich(bot)
    async with bot_on(fake_telegram.base_url, request=HTTPXRequest()) as bot:
        await send_rich(bot)
    ours, httpx_sent = fake_telegram.calls_to("sendMessage")
    assert ours.params == httpx_sent.params
    assert ours.content_type == httpx_sent.content_type == "application/x-www-form-urlencoded"
    assert ours.params["text"] == "bold and a reply ✓"
    assert sent_entities(ours) == [{"type": "bold", "offset": 0, "length": 4}]
    assert loads_param(ours, "reply_parameters")["message_id"] == 88


async def test_calls_share_one_kept_alive_connection_and_shutdown_closes_it(
        fake_telegram: FakeTelegramChats) -> None:
    async with bot_on(fake_telegram.base_url) as bot:
        for number in range(5):
            await bot.send_message(CHAT, f"message {number}")
        await bot.send_chat_action(CHAT, "typing")
        assert fake_telegram.open_connections() == 1
    await until(lambda: fake_telegram.open_connections() == 0)
    assert fake_telegram.texts() == [f"message {number}" for number in range(5)]


# --- PTB's errors, retries and rate limits ------------------------------------------------------
# AIORateLimiter reads retry_after as an int, which PTB 22 warns is deprecated
@pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
async def test_a_429_is_retry_after_and_the_rate_limiter_retries_after_it(
        fake_telegram: FakeTelegramChats) -> None:
    flood = (429, {"ok": False, "error_code": 429, "parameters": {"retry_after": 1},
                   "description": "Too Many Requests: retry after 1"})
    async with bot_on(fake_telegram.base_url) as bot:
        fake_telegram.fail_next["sendMessage"] = [flood]
        with pytest.raises(RetryAfter) as failure:
            await bot.send_message(CHAT, "too fast")
        assert retry_after_seconds(failure.value) == 1
    async with bot_on(fake_telegram.base_url,
                      rate_limiter=AIORateLimiter(max_retries=1)) as bot:
        fake_telegram.fail_next["sendMessage"] = [flood]
        loop = asyncio.get_running_loop()
        started = loop.time()
        sent = await bot.send_message(CHAT, "again")
        assert loop.time() - started >= 1  # PTB waited retry_after, then sent it again
        assert sent.text == "again"
    assert fake_telegram.texts() == ["too fast", "again", "again"]


async def test_an_unreachable_bot_api_is_a_network_error(fake_telegram: FakeTelegramChats) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    bot = Bot(TOKEN, base_url=f"http://127.0.0.1:{closed}/bot", request=GatewayRequest(),
              get_updates_request=GatewayRequest())
    with pytest.raises(NetworkError) as failure:
        await bot.initialize()
    await bot.shutdown()
    assert not isinstance(failure.value, TimedOut)
    assert "ConnectionFailed" in failure.value.message
    assert TOKEN not in failure.value.message


async def test_no_answer_within_the_read_timeout_is_timed_out(
        slow_telegram: SlowTelegram) -> None:
    async with bot_on(slow_telegram.base_url) as bot:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(TimedOut):
            await bot.do_api_request("slowMethod", read_timeout=0.2, connect_timeout=0.1)
        assert loop.time() - started < 0.9
        # the connection the timeout ended is not reused; the next call works
        assert await bot.do_api_request("slowMethod", read_timeout=3) is True
        assert (await bot.get_me()).username == "gateway_test_bot"


async def test_no_connection_within_the_connect_timeout_is_timed_out() -> None:
    with unanswered_port() as port:
        request = GatewayRequest(connect_timeout=0.2)
        bot = Bot(TOKEN, base_url=f"http://127.0.0.1:{port}/bot", request=request,
                  get_updates_request=GatewayRequest())
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(TimedOut, match="no connection within"):
            await bot.initialize()
        assert loop.time() - started < 2
        await bot.shutdown()


# --- large answers, downloads, uploads --------------------------------------------------------
async def test_a_large_get_updates_answer_arrives_whole(fake_telegram: FakeTelegramChats) -> None:
    text = "a long message ✓ " * 240  # ~4,000 characters each
    for update_id in range(1, 101):
        fake_telegram.updates.put_nowait({"update_id": update_id, "message": {
            "message_id": update_id, "date": 1767225600, "text": text,
            "chat": {"id": CHAT, "type": "private", "first_name": "Ada"},
            "from": {"id": CHAT, "is_bot": False, "first_name": "Ada"}}})
    async with bot_on(fake_telegram.base_url) as bot:
        updates = await bot.get_updates(timeout=1)
    assert [update.update_id for update in updates] == list(range(1, 101))
    assert all(update.message is not None and update.message.text == text
               for update in updates)


async def test_a_file_is_downloaded_through_get_file(fake_telegram: FakeTelegramChats) -> None:
    picture = bytes(range(256)) * 20_000  # 5 MB
    fake_telegram.files["big-photo"] = picture
    async with bot_on(fake_telegram.base_url) as bot:
        file = await bot.get_file("big-photo")
        assert bytes(await file.download_as_bytearray()) == picture
        assert bytes(await file.download_as_bytearray()) == picture  # kept-alive again
    assert fake_telegram.downloads == ["big-photo", "big-photo"]


async def test_an_upload_goes_through_httpx_as_multipart(fake_telegram: FakeTelegramChats) -> None:
    async with bot_on(fake_telegram.base_url) as bot:
        assert await bot.set_webhook("https://example.com/hook", certificate=b"-----PEM-----")
        await bot.send_message(CHAT, "after the upload")
    upload = fake_telegram.calls_to("setWebhook")[0]
    assert upload.content_type == "multipart/form-data"
    assert upload.params["url"] == "https://example.com/hook"
    assert fake_telegram.calls_to("sendMessage")[0].content_type == \
        "application/x-www-form-urlencoded"


# --- which request --------------------------------------------------------------------------------
@pytest.mark.parametrize(("environment", "expected"), [
    pytest.param({}, GatewayRequest, id="no-proxy"),
    pytest.param({"HTTPS_PROXY": "http://proxy.invalid:3128"}, HTTPXRequest, id="https-proxy"),
    pytest.param({"ALL_PROXY": "http://proxy.invalid:3128"}, HTTPXRequest, id="all-proxy"),
    pytest.param({"HTTPS_PROXY": "http://proxy.invalid:3128", "NO_PROXY": "api.telegram.org"},
                 GatewayRequest, id="bypassed"),
    pytest.param({"HTTP_PROXY": "http://proxy.invalid:3128"}, GatewayRequest,
                 id="proxy-for-http-only"),
])
def test_a_proxied_bot_api_keeps_httpx(monkeypatch: pytest.MonkeyPatch,
                                       environment: dict[str, str], expected: type) -> None:
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY", "https_proxy",
                 "http_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    request, get_updates_request = bot_api_requests("https://api.telegram.org/bot")
    assert isinstance(request, expected) and isinstance(get_updates_request, expected)
    assert request is not get_updates_request


async def test_a_call_before_initialize_or_after_shutdown_fails(
        fake_telegram: FakeTelegramChats) -> None:
    request = GatewayRequest()
    with pytest.raises(RuntimeError, match="not initialized"):
        await request.do_request(fake_telegram.base_url + TOKEN + "/getMe", "POST")
    await request.initialize()
    status, body = await request.do_request(fake_telegram.base_url + TOKEN + "/getMe", "POST")
    assert status == 200 and b'"ok": true' in body
    await request.shutdown()
    with pytest.raises(RuntimeError, match="not initialized"):
        await request.do_request(fake_telegram.base_url + TOKEN + "/getMe", "POST")
    assert request.read_timeout == 5.0
