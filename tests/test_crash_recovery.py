"""Nothing acknowledged is lost: real ``cloudybot serve`` processes, killed with SIGKILL.

Each test posts a backlog to a channel of a child gateway, kills it right after the last
acknowledgement (most messages are still unanswered then), starts it again on the same data
dir, and checks against the fake platform and the database that every acknowledged message
was answered: one turn each, in arrival order per conversation. A reply whose sending was cut
by the kill may be sent twice (delivery is at least once); no message is answered twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gateway.testing.fake_llm import FakeLLM, Recorded, Scripted, completion
from gateway.testing.loopback import LoopbackServer
from gateway.testing.slack import SIGNING_SECRET, FakeSlack, event_body, sign
from gateway.testing.slack import TOKEN as SLACK_TOKEN
from gateway.testing.telegram import SECRET, TOKEN, FakeTelegramChats
from tests.helpers import until
from tests.process import ServeProcess

BACKLOG = 30
CHATS = 3
WAIT_SECONDS = 60.0


@pytest.fixture
async def slow_llm(fake_llm: FakeLLM) -> FakeLLM:
    """Echoes, taking a moment per call: a backlog builds up behind the webhooks."""
    def echo_slowly(request: Recorded) -> Scripted:
        return Scripted(body=completion(f"echo: {request.messages[-1]['content']}"), delay=0.05)
    fake_llm.responder = echo_slowly
    return fake_llm


def llm_env(fake_llm: FakeLLM) -> dict[str, str]:
    return {"CLOUDYBOT_LLM_BASE_URL": fake_llm.url, "CLOUDYBOT_LLM_API_KEY": "sk-test",
            "CLOUDYBOT_LLM_MODEL": "fake-model", "CLOUDYBOT_LLM_MAX_RETRIES": "0",
            "CLOUDYBOT_DEFAULT_PLAN": "team"}  # no rate limit: the backlog is not throttled


@pytest.fixture
async def processes() -> AsyncIterator[list[ServeProcess]]:
    """Children to kill at teardown, whatever happened."""
    started: list[ServeProcess] = []
    yield started
    for process in started:
        await process.ensure_stopped()


def stored_user_messages(data_dir: Path) -> list[tuple[str, str]]:
    """(session key, text) of every user message in the display transcripts, in order."""
    with closing(sqlite3.connect(data_dir / "cloudybot.sqlite3")) as db:
        return db.execute(
            "SELECT t.session_key, d.content FROM display_messages d"
            " JOIN threads t ON t.id = d.thread WHERE d.role = 'user' ORDER BY d.id").fetchall()


def assert_each_answered_once_in_order(sent: list[tuple[str, str]],
                                       stored: list[tuple[str, str]],
                                       expected: dict[str, list[str]]) -> None:
    """``sent``/``stored``: (conversation, text); ``expected``: the texts per conversation."""
    for conversation, texts in expected.items():
        assert [t for c, t in stored if c == conversation] == texts  # one turn each, in order
        replies = [t for c, t in sent if c == conversation]
        first_seen = list(dict.fromkeys(replies))
        assert first_seen == [f"echo: {text}" for text in texts]
    duplicates = sum(count - 1 for count in Counter(sent).values())
    assert duplicates <= CHATS  # at most the send each conversation had in flight


async def serve(data_dir: Path, env: dict[str, str],
                processes: list[ServeProcess]) -> ServeProcess:
    """A started ``cloudybot serve`` child, killed at teardown whatever happens."""
    process = ServeProcess(data_dir, env)
    processes.append(process)
    await process.start()
    return process


async def kill_restart_and_check(first: ServeProcess, processes: list[ServeProcess],
                                 replies: Callable[[], list[tuple[str, str]]],
                                 expected: dict[str, list[str]]) -> None:
    """SIGKILL ``first`` right after its backlog was acknowledged, start the gateway again on
    its data dir, wait for every reply and check each message was answered once, in order."""
    await first.kill()
    assert len(set(replies())) < BACKLOG  # the kill really cut a backlog short
    second = first.again()
    processes.append(second)
    await second.start()
    await until(lambda: len(set(replies())) == BACKLOG, timeout=WAIT_SECONDS)
    assert await second.terminate() == 0
    assert_each_answered_once_in_order(replies(), stored_user_messages(first.data_dir),
                                       expected)


# --- Telegram (webhook) ------------------------------------------------------------------------
def telegram_update(update_id: int, chat: int, text: str) -> dict[str, Any]:
    return {"update_id": update_id, "message": {
        "message_id": update_id, "date": 1767225600, "text": text,
        "chat": {"id": chat, "type": "private", "first_name": "Ada"},
        "from": {"id": chat, "is_bot": False, "first_name": "Ada"}}}


async def test_telegram_webhook_backlog_survives_sigkill(
        tmp_path: Path, slow_llm: FakeLLM, fake_telegram: FakeTelegramChats,
        processes: list[ServeProcess]) -> None:
    first = await serve(tmp_path / "data", {
        **llm_env(slow_llm), "CLOUDYBOT_TELEGRAM_TOKEN": TOKEN,
        "CLOUDYBOT_TELEGRAM_API_BASE": fake_telegram.base_url,
        "CLOUDYBOT_TELEGRAM_WEBHOOK_SECRET": SECRET}, processes)
    expected: dict[str, list[str]] = {f"telegram:{100 + c}": [] for c in range(CHATS)}
    async with aiohttp.ClientSession() as session:
        for number in range(BACKLOG):
            chat = 100 + number % CHATS
            text = f"message {number}"
            async with session.post(f"{first.url}/telegram/webhook",
                                    json=telegram_update(1000 + number, chat, text),
                                    headers={"X-Telegram-Bot-Api-Secret-Token": SECRET}) as ok:
                assert ok.status == 200
            expected[f"telegram:{chat}"].append(text)
    await kill_restart_and_check(first, processes, lambda: telegram_replies(fake_telegram),
                                 expected)


def telegram_replies(bot_api: FakeTelegramChats) -> list[tuple[str, str]]:
    return [(f"telegram:{call.params['chat_id']}", call.params["text"])
            for call in bot_api.calls_to("sendMessage")]


async def test_telegram_polling_backlog_survives_sigkill(
        tmp_path: Path, slow_llm: FakeLLM, fake_telegram: FakeTelegramChats,
        processes: list[ServeProcess]) -> None:
    expected: dict[str, list[str]] = {f"telegram:{100 + c}": [] for c in range(CHATS)}
    for number in range(BACKLOG):
        chat = 100 + number % CHATS
        fake_telegram.updates.put_nowait(telegram_update(1000 + number, chat, f"message {number}"))
        expected[f"telegram:{chat}"].append(f"message {number}")
    first = await serve(tmp_path / "data", {
        **llm_env(slow_llm), "CLOUDYBOT_TELEGRAM_TOKEN": TOKEN,
        "CLOUDYBOT_TELEGRAM_API_BASE": fake_telegram.base_url}, processes)  # no secret: polling
    # Telegram forgets an update once a getUpdates call sends an offset above it: from then
    # on only the gateway has it.
    await until(lambda: fake_telegram.confirmed_below > 1000 + BACKLOG - 1, timeout=WAIT_SECONDS)
    await kill_restart_and_check(first, processes, lambda: telegram_replies(fake_telegram),
                                 expected)


# --- Slack -------------------------------------------------------------------------------------
async def test_slack_event_backlog_survives_sigkill(
        tmp_path: Path, slow_llm: FakeLLM, fake_slack: FakeSlack,
        processes: list[ServeProcess]) -> None:
    first = await serve(tmp_path / "data", {
        **llm_env(slow_llm), "CLOUDYBOT_SLACK_BOT_TOKEN": SLACK_TOKEN,
        "CLOUDYBOT_SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "CLOUDYBOT_SLACK_API_BASE": fake_slack.base_url}, processes)
    expected: dict[str, list[str]] = {}
    async with aiohttp.ClientSession() as session:
        for number in range(BACKLOG):
            channel = f"D0CHAT{number % CHATS}"
            text = f"message {number}"
            body = event_body({"type": "message", "channel_type": "im", "channel": channel,
                               "user": "U0ADA", "text": text, "ts": f"1767226000.{number:06d}"},
                              f"Ev{number}")
            async with session.post(f"{first.url}/slack/events", data=body,
                                    headers=sign(SIGNING_SECRET, body)) as ok:
                assert ok.status == 200
            expected.setdefault(f"slack:T0G9PQBBK:{channel}", []).append(text)

    def replies() -> list[tuple[str, str]]:
        return [(f"slack:T0G9PQBBK:{call.params['channel']}", call.params["text"])
                for call in fake_slack.calls_to("chat.postMessage")]
    await kill_restart_and_check(first, processes, replies, expected)


# --- the example third-party channel (signed webhooks) ----------------------------------------
class Callback:
    """The example channel's callback receiver on loopback; ``failing`` answers 502."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.failing = False
        self.refused = 0
        self.url = ""
        self._server = LoopbackServer()

    async def _handle(self, request: web.Request) -> web.Response:
        if self.failing:
            self.refused += 1
            return web.json_response({"error": "down"}, status=502)
        self.received.append(json.loads(await request.read()))
        return web.json_response({"ok": True})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/replies", self._handle)
        self.url = f"http://127.0.0.1:{await self._server.serve(app)}/replies"

    async def close(self) -> None:
        await self._server.close()


@pytest.fixture
async def callback() -> AsyncIterator[Callback]:
    receiver = Callback()
    await receiver.start()
    yield receiver
    await receiver.close()


WEBHOOK_SECRET = "example-channel-secret"


def webhook_env(fake_llm: FakeLLM, callback: Callback) -> dict[str, str]:
    return {**llm_env(fake_llm), "CLOUDYBOT_WEBHOOK_SECRET": WEBHOOK_SECRET,
            "CLOUDYBOT_WEBHOOK_CALLBACK_URL": callback.url}


async def post_webhook(session: aiohttp.ClientSession, server: ServeProcess, message_id: str,
                       conversation: str, text: str) -> int:
    from cloudybot_webhook import signed_headers

    body = json.dumps({"id": message_id, "conversation": conversation, "sender": "ada",
                       "text": text}).encode()
    async with session.post(f"{server.url}/webhook/messages", data=body,
                            headers=signed_headers(WEBHOOK_SECRET, body)) as answer:
        return answer.status


async def test_example_webhook_channel_backlog_survives_sigkill(
        tmp_path: Path, slow_llm: FakeLLM, callback: Callback,
        processes: list[ServeProcess]) -> None:
    pytest.importorskip("cloudybot_webhook")
    first = await serve(tmp_path / "data", webhook_env(slow_llm, callback), processes)
    expected: dict[str, list[str]] = {}
    async with aiohttp.ClientSession() as session:
        for number in range(BACKLOG):
            conversation = f"ticket-{number % CHATS}"
            text = f"message {number}"
            assert await post_webhook(session, first, f"m-{number}", conversation, text) == 202
            expected.setdefault(f"webhook:{conversation}", []).append(text)
    await kill_restart_and_check(
        first, processes,
        lambda: [(f"webhook:{r['conversation']}", r["text"]) for r in callback.received],
        expected)


async def test_a_reply_the_platform_refuses_for_a_while_arrives_once_across_a_restart(
        tmp_path: Path, fake_llm: FakeLLM, callback: Callback,
        processes: list[ServeProcess]) -> None:
    pytest.importorskip("cloudybot_webhook")
    env = webhook_env(fake_llm, callback)
    data_dir = tmp_path / "data"
    first = await serve(data_dir, env, processes)
    callback.failing = True
    async with aiohttp.ClientSession() as session:
        assert await post_webhook(session, first, "m-1", "ticket-1", "hello") == 202
    await until(lambda: callback.refused >= 2, timeout=WAIT_SECONDS)  # retried with backoff
    assert await first.terminate() == 0  # a clean stop: the reply stays in the outbox

    second = await serve(data_dir, env, processes)
    await until(lambda: callback.refused >= 3, timeout=WAIT_SECONDS)  # still retrying
    callback.failing = False
    await until(lambda: len(callback.received) == 1, timeout=WAIT_SECONDS)
    assert await second.terminate() == 0
    assert [(r["inReplyTo"], r["text"]) for r in callback.received] == [("m-1", "echo: hello")]
    assert len(fake_llm.chat_requests) == 1  # delivery never re-ran the agent
    with closing(sqlite3.connect(data_dir / "cloudybot.sqlite3")) as db:
        assert db.execute("SELECT count(*) FROM outbox").fetchone() == (0,)


async def test_sigterm_with_a_long_backlog_stops_within_the_grace_period(
        tmp_path: Path, fake_llm: FakeLLM, callback: Callback,
        processes: list[ServeProcess]) -> None:
    pytest.importorskip("cloudybot_webhook")
    release = asyncio.Event()
    fake_llm.responder = lambda request: Scripted(
        body=completion(f"echo: {request.messages[-1]['content']}"), release=release)
    env = {**webhook_env(fake_llm, callback), "CLOUDYBOT_SHUTDOWN_GRACE_SECONDS": "1"}
    data_dir = tmp_path / "data"
    first = await serve(data_dir, env, processes)
    async with aiohttp.ClientSession() as session:
        for number in range(40):
            status = await post_webhook(session, first, f"m-{number}", "ticket-1",
                                        f"message {number}")
            assert status == 202
    await until(lambda: len(fake_llm.requests) == 1)  # the first turn hangs at the model
    loop = asyncio.get_running_loop()
    began = loop.time()
    assert await first.terminate(timeout=30) == 0
    assert loop.time() - began < 10  # the grace (1 s) plus the server's own shutdown
    assert callback.received == []

    release.set()  # the model answers at once from now on
    second = await serve(data_dir, env, processes)
    await until(lambda: len(callback.received) == 40, timeout=WAIT_SECONDS)
    assert [r["text"] for r in callback.received] == [f"echo: message {n}" for n in range(40)]
    assert await second.terminate() == 0


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "events"])
async def test_sigterm_with_a_chat_request_in_flight_stops_within_the_grace_period(
        tmp_path: Path, fake_llm: FakeLLM, processes: list[ServeProcess],
        streamed: bool) -> None:
    """The whole stop fits the grace: aiohttp alone waited for a stuck handler twice as long."""
    release = asyncio.Event()  # never set: the model hangs
    fake_llm.responder = lambda request: Scripted(body=completion("late"), release=release)
    grace = 3.0
    env = {**llm_env(fake_llm), "CLOUDYBOT_SHUTDOWN_GRACE_SECONDS": str(grace)}
    server = ServeProcess(tmp_path / "data", env)
    processes.append(server)
    added = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", "users", "add", "alice", env=server.env,
        stdout=asyncio.subprocess.PIPE)
    token = (await added.communicate())[0].decode().split()[-1]
    await server.start()
    headers = {"Authorization": f"Bearer {token}",
               "Accept": "text/event-stream" if streamed else "application/json"}
    async with aiohttp.ClientSession() as session:
        chat = asyncio.ensure_future(session.post(
            f"{server.url}/chat", json={"threadId": "t1", "message": "hello"},
            headers=headers))
        await until(lambda: len(fake_llm.requests) == 1)
        loop = asyncio.get_running_loop()
        began = loop.time()
        assert await server.terminate(timeout=30) == 0
        assert loop.time() - began < grace  # requests, work, closing and exit alike
        if not streamed:  # told to send it again, in the API's error shape
            response = await chat
            assert response.status == 503
            assert (await response.json())["error"]["code"] == "shutting_down"
        else:
            with contextlib.suppress(aiohttp.ClientError):
                (await chat).close()
