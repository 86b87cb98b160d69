"""More Telegram end to end: groups, forums, Bot API failures, start-up, logs, shutdown.

python-telegram-bot talks HTTP to the fake Bot API on 127.0.0.1; nothing is mocked. Waits are
bounded polls on what the fakes recorded. Tests marked ``xfail(strict=True)`` pin known bugs.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from telegram import Bot

from gateway import Gateway
from gateway.base.errors import GatewayError
from gateway.config.settings import Settings
from gateway.plugins.manager import PluginManager
from gateway.testing.fake_llm import FakeLLM, Scripted, completion
from gateway.testing.telegram import (
    BOT_ID,
    BOT_USERNAME,
    SECRET,
    TOKEN,
    FakeTelegramChats,
    blocked_by_user,
    loads_param,
    upgraded_to_supergroup,
)
from tests.conftest import Harness
from tests.helpers import stop_while_held, until
from tests.test_telegram import ADA, payload, post_update

GRACE = 777000222
GROUP = -4012345678
FORUM = -1001971186208


def group_update(update_id: int, text: str, *, sender: int = GRACE, entities: bool = False,
                 **message: Any) -> dict[str, Any]:
    """A message in the basic group ``GROUP``; ``entities`` marks a leading @mention."""
    update = payload("tg_group_text.json", update_id=update_id, text=text)
    body = update["message"]
    body["from"] = {"id": sender, "is_bot": False, "first_name": f"User{sender}"}
    if entities:
        body["entities"] = [{"offset": 0, "length": len(BOT_USERNAME) + 1, "type": "mention"}]
    else:
        body.pop("entities", None)
    body.update(message)
    return update


def private_update(update_id: int, text: str, user: int = ADA) -> dict[str, Any]:
    update = payload("tg_private_text.json", update_id=update_id, text=text)
    update["message"]["from"]["id"] = user
    update["message"]["chat"]["id"] = user
    return update


# --- groups ---------------------------------------------------------------------------------
async def test_reply_to_the_bots_message_in_a_group_is_answered_without_mention(
        tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM) -> None:
    bots_message = {"message_id": 5000, "date": 1767225700, "text": "earlier answer",
                    "chat": {"id": GROUP, "title": "Ops team", "type": "group"},
                    "from": {"id": BOT_ID, "is_bot": True, "first_name": "Gateway Test",
                             "username": BOT_USERNAME}}
    someone_elses = dict(bots_message, message_id=4000,
                         **{"from": {"id": 777000333, "is_bot": False, "first_name": "Bob"}})
    await post_update(tg, group_update(902348001, "replying to Bob, not the bot",
                                       reply_to_message=someone_elses))
    await post_update(tg, group_update(902348002, "and what about tomorrow?",
                                       reply_to_message=bots_message))
    [sent] = await fake_telegram.wait_for_messages(1)
    await tg.gateway.drain()
    assert [r.messages[-1]["content"] for r in fake_llm.chat_requests] == [
        "and what about tomorrow?"]
    assert sent.params["text"] == "echo: and what about tomorrow?"
    assert loads_param(sent, "reply_parameters")["message_id"] == 88


async def test_command_addressed_to_another_bot_is_ignored(
        tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM) -> None:
    await post_update(tg, group_update(902348010, "@gateway_test_bot remember this chat",
                                       entities=True))
    await fake_telegram.wait_for_messages(1)
    for update_id, text in ((902348011, "/new@otherbot"), (902348012, "/usage@OtherBot"),
                            (902348013, "/ask@other_bot what is up")):
        assert (await post_update(tg, group_update(update_id, text))).status == 200
    await post_update(tg, group_update(902348014, "/memory@gateway_test_bot"))
    sent = await fake_telegram.wait_for_messages(2)
    await tg.gateway.drain()
    assert len(fake_telegram.calls_to("sendMessage")) == 2
    assert sent[1].params["text"].startswith("Nothing is pinned")
    assert len(fake_llm.chat_requests) == 1
    # /new@otherbot did not clear our conversation
    thread = await tg.gateway.store.get_thread(f"telegram:{GROUP}")
    assert thread is not None
    _, messages = await tg.gateway.store.rolling_memory(f"telegram:{GROUP}")
    assert len(messages) == 2


async def test_messages_from_bots_are_ignored(
        tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM) -> None:
    from_bot = group_update(902348020, "@gateway_test_bot ping from a bot", entities=True)
    from_bot["message"]["from"] = {"id": 5550001, "is_bot": True, "first_name": "Other",
                                   "username": "other_bot"}
    private_bot = payload("tg_private_text.json", update_id=902348021)
    private_bot["message"]["from"]["is_bot"] = True
    for update in (from_bot, private_bot):
        assert (await post_update(tg, update)).status == 200
    await tg.gateway.drain()
    assert fake_llm.requests == []
    assert fake_telegram.calls_to("sendMessage") == []
    assert await tg.gateway.store.get_user("telegram:5550001") is None


async def test_group_mode_all_answers_every_text_message(
        start_telegram: Callable[..., Awaitable[Harness]], fake_telegram: FakeTelegramChats,
        fake_llm: FakeLLM) -> None:
    tg = await start_telegram(telegram_group_mode="all")
    await post_update(tg, group_update(902348030, "no mention at all"))
    [sent] = await fake_telegram.wait_for_messages(1)
    assert sent.params["text"] == "echo: no mention at all"


async def test_group_mode_all_ignores_service_messages(
        start_telegram: Callable[..., Awaitable[Harness]], fake_telegram: FakeTelegramChats,
        fake_llm: FakeLLM) -> None:
    tg = await start_telegram(telegram_group_mode="all")
    joined = group_update(902348031, "")
    del joined["message"]["text"]
    joined["message"]["new_chat_members"] = [{"id": 777000444, "is_bot": False,
                                              "first_name": "Newcomer"}]
    await post_update(tg, joined)
    await post_update(tg, group_update(902348032, "hello everyone"))
    await fake_telegram.wait_for_messages(1)
    await tg.gateway.drain()
    assert fake_telegram.texts() == ["echo: hello everyone"]


async def test_private_service_message_is_not_answered(
        tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM) -> None:
    pinned = payload("tg_private_text.json", update_id=902348033)
    original = dict(pinned["message"])
    del pinned["message"]["text"]
    pinned["message"]["pinned_message"] = original
    await post_update(tg, pinned)
    await post_update(tg, payload("tg_private_text.json", update_id=902348034, text="next"))
    await fake_telegram.wait_for_messages(1)
    await tg.gateway.drain()
    assert fake_telegram.texts() == ["echo: next"]


async def test_unknown_command_without_addressee_in_a_group_is_not_answered(
        tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM) -> None:
    await post_update(tg, group_update(902348040, "/weather Paris", entities=False))
    await post_update(tg, group_update(902348041, "@gateway_test_bot hi", entities=True))
    await fake_telegram.wait_for_messages(1)
    await tg.gateway.drain()
    assert [r.messages[-1]["content"] for r in fake_llm.chat_requests] == ["hi"]


async def test_a_mention_alone_starts_no_empty_turn(
        tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM) -> None:
    await post_update(tg, group_update(902348050, "@gateway_test_bot", entities=True))
    await post_update(tg, group_update(902348051, "@GATEWAY_TEST_BOT  ", entities=True))
    await post_update(tg, group_update(902348052, "@gateway_test_bot real question",
                                       entities=True))
    [sent] = await fake_telegram.wait_for_messages(1)
    await tg.gateway.drain()
    assert sent.params["text"] == "echo: real question"
    assert [r.messages[-1]["content"] for r in fake_llm.chat_requests] == ["real question"]


async def test_group_thread_is_owned_by_its_first_sender_and_each_turn_billed_to_its_sender(
        tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM) -> None:
    await post_update(tg, group_update(902348060, "@gateway_test_bot first", entities=True))
    await fake_telegram.wait_for_messages(1)
    await post_update(tg, group_update(902348061, "@gateway_test_bot second", sender=ADA,
                                       entities=True))
    await fake_telegram.wait_for_messages(2)
    await tg.gateway.drain()
    thread = await tg.gateway.store.get_thread(f"telegram:{GROUP}")
    assert thread is not None and thread.ref.user_id == f"telegram:{GRACE}"
    grace = [row.kind for row in await tg.gateway.store.ledger(f"telegram:{GRACE}")]
    ada = [row.kind for row in await tg.gateway.store.ledger(f"telegram:{ADA}")]
    assert grace.count("chat") == 1
    assert ada.count("chat") == 1
    # the second sender's turn continued the same conversation
    assert [m["content"] for m in fake_llm.chat_requests[1].messages[1:]] == [
        "first", "echo: first", "second"]


# --- forums -----------------------------------------------------------------------------------
async def test_general_topic_of_a_forum_uses_the_chat_key_and_no_thread_id(
        tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM) -> None:
    update = payload("tg_forum_topic_text.json", update_id=902348070,
                     text="@gateway_test_bot hello in General")
    message = update["message"]
    for field in ("message_thread_id", "is_topic_message", "reply_to_message"):
        del message[field]
    message["entities"] = [{"offset": 0, "length": 17, "type": "mention"}]
    tg.gateway.inbox.typing_delay_seconds = 0
    await post_update(tg, update)
    [sent] = await fake_telegram.wait_for_messages(1)
    await tg.gateway.drain()
    assert sent.params["chat_id"] == str(FORUM)
    assert "message_thread_id" not in sent.params
    assert await tg.gateway.store.get_thread(f"telegram:{FORUM}") is not None
    assert fake_telegram.calls_to("sendChatAction")[0].params.get("message_thread_id") is None


async def test_edited_message_in_a_topic_stays_in_the_topic(
        tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM) -> None:
    update = payload("tg_forum_topic_text.json", update_id=902348071,
                     text="@gateway_test_bot how much is left?")
    message = update.pop("message")
    message["entities"] = [{"offset": 0, "length": 17, "type": "mention"}]
    message["edit_date"] = 1767225999
    update["edited_message"] = message
    await post_update(tg, update)
    [sent] = await fake_telegram.wait_for_messages(1)
    await tg.gateway.drain()
    assert sent.params["message_thread_id"] == "2391"
    assert sent.params["text"] == "echo: [edited] how much is left?"
    assert await tg.gateway.store.get_thread(f"telegram:{FORUM}:2391") is not None


# --- Bot API failures -------------------------------------------------------------------------
@pytest.mark.parametrize("timedelta_mode", [
    # PTB warns (PTBDeprecationWarning) when it builds an int RetryAfter; production's default
    # filters ignore it, the suite's "error" filter would turn it into an exception.
    pytest.param("0", marks=pytest.mark.filterwarnings(
        "ignore::telegram.warnings.PTBDeprecationWarning")),
    "1"])
async def test_retry_after_is_waited_for_as_told(
        monkeypatch: pytest.MonkeyPatch, tg: Harness, fake_telegram: FakeTelegramChats,
        fake_llm: FakeLLM, timedelta_mode: str) -> None:
    """``retry_after: 7`` is honoured both as int and as timedelta (PTB_TIMEDELTA=1): the
    outbox waits what Telegram said (plus up to 10% jitter), not its own 30 s backoff. The
    waits are recorded, not slept. (``retry_after: 0`` would not do: PTB raises RetryAfter
    only for a truthy value.)"""
    monkeypatch.setenv("PTB_TIMEDELTA", timedelta_mode)
    tg.gateway.outbox.backoff_seconds = 30
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    tg.gateway.outbox.wait = record
    fake_telegram.fail_next["sendMessage"] = [(429, {
        "ok": False, "error_code": 429, "description": "Too Many Requests: retry after 7",
        "parameters": {"retry_after": 7}})]
    await post_update(tg, payload("tg_private_text.json"))
    await tg.gateway.drain()
    assert fake_telegram.texts() == ["echo: Hi! What's on my list today?"] * 2
    assert len(waits) == 1 and 7.0 <= waits[0] <= 7.7
    assert len(fake_llm.chat_requests) == 1


async def test_bot_blocked_by_the_user_is_given_up_at_once(
        tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM) -> None:
    tg.gateway.outbox.backoff_seconds = 0.01
    fake_telegram.chat_failures[ADA] = blocked_by_user()
    await post_update(tg, payload("tg_private_text.json"))
    await post_update(tg, payload("tg_private_text.json", update_id=902348080, text="again?"))
    await tg.gateway.drain()
    assert len(fake_telegram.sent_to(ADA)) == 2  # one attempt per reply, no retry storm
    assert len(fake_llm.chat_requests) == 2
    # the turns are stored: redeliveries are not answered (nor the agent re-run)
    await post_update(tg, payload("tg_private_text.json"))
    await tg.gateway.drain()
    assert len(fake_llm.chat_requests) == 2


async def test_network_error_from_send_message_is_retried(
        tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM) -> None:
    tg.gateway.outbox.backoff_seconds = 0.01
    fake_telegram.fail_next["sendMessage"] = [
        (502, {"ok": False, "error_code": 502, "description": "Bad Gateway"})] * 2
    await post_update(tg, payload("tg_private_text.json"))
    await until(lambda: len(fake_telegram.calls_to("sendMessage")) == 3)
    await tg.gateway.drain()
    assert len(fake_telegram.calls_to("sendMessage")) == 3
    assert len(fake_llm.chat_requests) == 1


async def test_migrated_group_is_not_retried_against_the_old_chat(
        tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM) -> None:
    tg.gateway.outbox.backoff_seconds = 0.01
    fake_telegram.chat_failures[GROUP] = upgraded_to_supergroup(-1009876543210)
    await post_update(tg, payload("tg_group_text.json"))
    await tg.gateway.drain()
    assert len(fake_telegram.sent_to(GROUP)) == 1


# --- webhook, polling, start-up -----------------------------------------------------------------
async def test_set_webhook_registers_url_secret_and_update_types(
        start_telegram: Callable[..., Awaitable[Harness]],
        fake_telegram: FakeTelegramChats) -> None:
    url = "https://bot.example.com/telegram/webhook"
    await start_telegram(telegram_webhook_url=url)
    [call] = fake_telegram.calls_to("setWebhook")
    assert call.params["url"] == url
    assert call.params["secret_token"] == SECRET
    assert loads_param(call, "allowed_updates") == ["message", "edited_message"]
    assert fake_telegram.calls_to("getUpdates") == []
    assert fake_telegram.calls_to("deleteWebhook") == []


async def test_webhook_mode_without_url_does_not_call_set_webhook(
        tg: Harness, fake_telegram: FakeTelegramChats) -> None:
    assert fake_telegram.calls_to("setWebhook") == []
    assert [c.method for c in fake_telegram.calls] == ["getMe"]


@pytest.mark.parametrize("overrides", [{"telegram_webhook_secret": ""},
                                       {"telegram_token": ""}])
async def test_webhook_route_exists_only_in_webhook_mode(
        start_telegram: Callable[..., Awaitable[Harness]], fake_telegram: FakeTelegramChats,
        fake_llm: FakeLLM, overrides: dict[str, str]) -> None:
    tg = await start_telegram(**overrides)
    response = await post_update(tg, payload("tg_private_text.json"))
    assert response.status == 404
    assert (await response.json())["error"]["code"] == "not_found"
    await tg.gateway.drain()
    assert fake_llm.requests == []
    if "telegram_token" in overrides:
        assert fake_telegram.calls == []  # no token: the channel never talks to Telegram


async def test_oversized_update_is_413_json(
        start_telegram: Callable[..., Awaitable[Harness]], fake_llm: FakeLLM) -> None:
    tg = await start_telegram(max_request_bytes=4096)
    response = await post_update(tg, payload("tg_private_text.json", text="x" * 8000))
    assert response.status == 413
    assert (await response.json())["error"]["code"] == "too_large"
    await tg.gateway.drain()
    assert fake_llm.requests == []


@pytest.mark.parametrize("message", ["not an object", 5])
async def test_update_with_a_non_object_message_is_400(
        tg: Harness, fake_llm: FakeLLM, message: Any) -> None:
    update = payload("tg_private_text.json")
    if isinstance(message, str):
        update["message"] = message
    else:
        update["message"]["reply_to_message"] = message
    response = await post_update(tg, update)
    assert response.status == 400
    await tg.gateway.drain()
    assert fake_llm.requests == []


async def _start_with_rejected_token(make_settings: Callable[..., Settings],
                                     pm: PluginManager,
                                     fake_telegram: FakeTelegramChats) -> BaseException:
    fake_telegram.fail_next["getMe"] = [(401, {"ok": False, "error_code": 401,
                                               "description": "Unauthorized"})]
    gateway = Gateway(make_settings(telegram_token=TOKEN,
                                    telegram_api_base=fake_telegram.base_url,
                                    telegram_webhook_secret=SECRET), pm)
    with pytest.raises(Exception) as failure:
        await gateway.start()
    return failure.value


async def _close_leaked_bots() -> None:
    """Test hygiene only: shut down Bot API clients a failed start left open (see the bug)."""
    for thing in gc.get_objects():
        if isinstance(thing, Bot) and thing.token == TOKEN:
            await thing.shutdown()


async def test_rejected_token_fails_start_up_without_revealing_the_token(
        make_settings: Callable[..., Settings], pm: PluginManager,
        fake_telegram: FakeTelegramChats) -> None:
    try:
        error = await _start_with_rejected_token(make_settings, pm, fake_telegram)
        assert isinstance(error, GatewayError)
        assert TOKEN not in str(error)
    finally:
        await _close_leaked_bots()


async def test_failed_start_up_leaves_no_connection_open(
        make_settings: Callable[..., Settings], pm: PluginManager,
        fake_telegram: FakeTelegramChats) -> None:
    try:
        await _start_with_rejected_token(make_settings, pm, fake_telegram)
        await until(lambda: fake_telegram.open_connections() == 0, timeout=2)
    finally:
        await _close_leaked_bots()


async def test_bot_token_never_reaches_the_logs(
        tg: Harness, fake_telegram: FakeTelegramChats, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)  # what `cloudybot serve` configures
    await post_update(tg, payload("tg_private_text.json"))
    await fake_telegram.wait_for_messages(1)
    await tg.gateway.drain()
    # aiohttp.access lines come from the fakes' servers (the real Bot API is remote)
    ours = [r.getMessage() for r in caplog.records if r.name != "aiohttp.access"]
    assert ours  # something was logged at all
    assert not [line for line in ours if TOKEN in line]


# --- concurrency and shutdown -------------------------------------------------------------------
async def test_a_slow_chat_does_not_hold_up_another_chat(
        tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM) -> None:
    release = asyncio.Event()

    def slow_for_ada(request: Any) -> Scripted:
        text = request.messages[-1]["content"]
        return Scripted(body=completion(f"echo: {text}"),
                        release=release if text == "slow" else None)

    fake_llm.responder = slow_for_ada
    await post_update(tg, private_update(902348090, "slow"))
    await until(lambda: len(fake_llm.chat_requests) == 1)
    await post_update(tg, private_update(902348091, "fast", user=777000333))
    [first] = await fake_telegram.wait_for_messages(1)
    assert (first.params["chat_id"], first.params["text"]) == ("777000333", "echo: fast")
    release.set()
    sent = await fake_telegram.wait_for_messages(2)
    assert sent[1].params["text"] == "echo: slow"


async def test_polling_stop_and_start_answers_each_later_update_once(
        start_telegram: Callable[..., Awaitable[Harness]], fake_telegram: FakeTelegramChats,
        fake_llm: FakeLLM) -> None:
    tg = await start_telegram(telegram_webhook_secret="")
    channel = tg.gateway.channels["telegram"]
    for _ in range(2):
        await channel.stop()
        await channel.stop()  # idempotent
        await channel.start()
    for i in range(3):
        await fake_telegram.updates.put(private_update(902348100 + i, f"m{i}"))
    await fake_telegram.wait_for_messages(3)
    await fake_telegram.updates.put(private_update(902348100, "m0"))  # a redelivery
    await fake_telegram.updates.put(private_update(902348110, "last"))
    sent = await fake_telegram.wait_for_messages(4)
    await tg.gateway.drain()
    assert [c.params["text"] for c in sent] == ["echo: m0", "echo: m1", "echo: m2",
                                               "echo: last"]
    assert len(fake_llm.chat_requests) == 4


async def test_stopping_the_gateway_delivers_queued_replies(
        tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM) -> None:
    tg.gateway.outbox.backoff_seconds = 0.01

    release = asyncio.Event()

    def slow_first(request: Any) -> Scripted:
        text = request.messages[-1]["content"]
        return Scripted(body=completion(f"echo: {text}"),
                        release=release if text == "one" else None)

    fake_llm.responder = slow_first
    await post_update(tg, private_update(902348120, "one"))
    await post_update(tg, private_update(902348121, "two"))
    await until(lambda: len(fake_llm.chat_requests) == 1)
    await stop_while_held(tg, release)  # while "one" is answered and "two" waits
    assert len(fake_llm.chat_requests) == 2  # both turns ran (and were stored)
    assert fake_telegram.texts() == ["echo: one", "echo: two"]
