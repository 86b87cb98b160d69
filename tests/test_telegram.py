"""Telegram end to end: python-telegram-bot against a fake Bot API on 127.0.0.1."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.kit.inbound import PROVIDER_APOLOGY
from gateway.testing.fake_llm import FakeLLM, Scripted, completion
from gateway.testing.telegram import SECRET, FakeTelegram, loads_param
from tests.conftest import Harness
from tests.helpers import session_events, until

PAYLOADS = Path(__file__).parent / "payloads"
ADA = 777000111


def payload(name: str, update_id: int | None = None, text: str | None = None) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((PAYLOADS / name).read_text())
    data = copy.deepcopy(data)
    if update_id is not None:
        data["update_id"] = update_id
    if text is not None:
        (data.get("message") or data["edited_message"])["text"] = text
    return data


async def post_update(harness: Harness, update: dict[str, Any], secret: str = SECRET) -> Any:
    return await harness.client.post("/telegram/webhook", json=update,
                                     headers={"X-Telegram-Bot-Api-Secret-Token": secret})


async def test_private_message_is_answered_through_the_bot_api(
        tg: Harness, fake_telegram: FakeTelegram, fake_llm: FakeLLM) -> None:
    assert fake_telegram.calls[0].method == "getMe"
    tg.gateway.inbox.typing_delay_seconds = 0  # "typing…" at once, even for a fast reply
    response = await post_update(tg, payload("tg_private_text.json"))
    assert response.status == 200
    [sent] = await fake_telegram.wait_for_messages(1)
    assert sent.content_type == "application/x-www-form-urlencoded"
    assert sent.params["chat_id"] == str(ADA)
    assert sent.params["text"] == "echo: Hi! What's on my list today?"
    assert "message_thread_id" not in sent.params
    assert "parse_mode" not in sent.params  # entities, never a parse mode: no text breaks it
    assert fake_telegram.calls_to("sendChatAction")[0].params["action"] == "typing"
    await tg.gateway.drain()
    thread = await tg.gateway.store.get_thread(f"telegram:{ADA}")
    assert thread is not None
    assert thread.ref.user_id == f"telegram:{ADA}"
    [header, *_] = await session_events(tg.gateway, f"telegram:{ADA}")
    assert header["key"] == f"telegram:{ADA}"
    user = await tg.gateway.store.get_user(f"telegram:{ADA}")
    assert user is not None and user.plan == "free"


async def test_group_message_is_answered_only_when_mentioned(
        tg: Harness, fake_telegram: FakeTelegram, fake_llm: FakeLLM) -> None:
    plain = payload("tg_group_text.json", update_id=902347100, text="just chatting, no bot")
    plain["message"].pop("entities")
    assert (await post_update(tg, plain)).status == 200
    assert (await post_update(tg, payload("tg_group_text.json"))).status == 200
    [sent] = await fake_telegram.wait_for_messages(1)
    await tg.gateway.drain()
    assert len(fake_llm.chat_requests) == 1
    assert fake_llm.chat_requests[0].messages[-1]["content"] == "summarize the incident please"
    assert sent.params["chat_id"] == "-4012345678"
    assert loads_param(sent, "reply_parameters")["message_id"] == 88
    thread = await tg.gateway.store.get_thread("telegram:-4012345678")
    assert thread is not None and thread.ref.user_id == "telegram:777000222"


async def test_forum_topic_gets_its_own_key_and_reply_in_the_topic(
        tg: Harness, fake_telegram: FakeTelegram, fake_llm: FakeLLM) -> None:
    await post_update(tg, payload("tg_forum_topic_text.json"))
    [sent] = await fake_telegram.wait_for_messages(1)
    assert sent.params["message_thread_id"] == "2391"
    assert sent.params["chat_id"] == "-1001971186208"
    # "/ask@bot why..." is not one of our commands: it is chat about its text
    assert fake_llm.chat_requests[0].messages[-1]["content"] == "why was I charged twice?"
    assert await tg.gateway.store.get_thread("telegram:-1001971186208:2391") is not None


async def test_edited_message_is_a_new_turn_marked_edited(
        tg: Harness, fake_telegram: FakeTelegram, fake_llm: FakeLLM) -> None:
    await post_update(tg, payload("tg_private_text.json"))
    await post_update(tg, payload("tg_edited_message.json"))
    sent = await fake_telegram.wait_for_messages(2)
    assert sent[1].params["text"] == "echo: [edited] Hi! What's on my list for tomorrow?"


async def test_photo_without_caption_gets_a_note_and_no_llm_call(
        tg: Harness, fake_telegram: FakeTelegram, fake_llm: FakeLLM) -> None:
    await post_update(tg, payload("tg_photo.json"))
    [sent] = await fake_telegram.wait_for_messages(1)
    assert "only read text" in sent.params["text"]
    assert fake_llm.requests == []


async def test_photo_with_caption_is_a_turn_about_the_caption(
        tg: Harness, fake_telegram: FakeTelegram, fake_llm: FakeLLM) -> None:
    update = payload("tg_photo.json")
    update["message"]["caption"] = "what plant is this?"
    await post_update(tg, update)
    [sent] = await fake_telegram.wait_for_messages(1)
    assert sent.params["text"] == "echo: [photo] what plant is this?"


@pytest.mark.parametrize("secret", ["wrong", ""])
async def test_bad_secret_is_refused_and_nothing_processed(
        tg: Harness, fake_telegram: FakeTelegram, fake_llm: FakeLLM, secret: str) -> None:
    response = await post_update(tg, payload("tg_private_text.json"), secret=secret)
    assert response.status == 403
    assert (await response.json())["error"]["code"] == "forbidden"
    await tg.gateway.drain()
    assert fake_llm.requests == []
    assert fake_telegram.calls_to("sendMessage") == []


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b'{"update_id": "x"}', b"\xff\xfe",
                                  b"[" * 50000])
async def test_malformed_update_is_400_not_500(tg: Harness, fake_llm: FakeLLM,
                                               body: bytes) -> None:
    response = await tg.client.post("/telegram/webhook", data=body, headers={
        "X-Telegram-Bot-Api-Secret-Token": SECRET, "Content-Type": "application/json"})
    assert response.status == 400
    assert "error" in await response.json()
    assert fake_llm.requests == []


async def test_redelivered_update_is_answered_once(
        tg: Harness, fake_telegram: FakeTelegram, fake_llm: FakeLLM) -> None:
    for _ in range(3):
        assert (await post_update(tg, payload("tg_private_text.json"))).status == 200
    await tg.gateway.drain()
    assert len(fake_telegram.calls_to("sendMessage")) == 1
    assert len(fake_llm.chat_requests) == 1


async def test_redelivery_after_a_restart_is_answered_once(
        start_telegram: Callable[..., Awaitable[Harness]], fake_telegram: FakeTelegram,
        fake_llm: FakeLLM) -> None:
    first = await start_telegram()
    await post_update(first, payload("tg_private_text.json"))
    await fake_telegram.wait_for_messages(1)
    await first.client.close()  # stops the gateway, as a shutdown would

    second = await start_telegram()
    await post_update(second, payload("tg_private_text.json"))
    await post_update(second, payload("tg_private_text.json", update_id=902347010,
                                      text="a new question"))
    sent = await fake_telegram.wait_for_messages(2)
    await second.gateway.drain()
    assert [c.params["text"] for c in sent] == ["echo: Hi! What's on my list today?",
                                               "echo: a new question"]
    assert len(fake_llm.chat_requests) == 2


async def test_messages_arriving_together_are_all_answered_in_order(
        tg: Harness, fake_telegram: FakeTelegram, fake_llm: FakeLLM) -> None:
    def slow_first(request: Any) -> Scripted:
        text = request.messages[-1]["content"]
        return Scripted(body=completion(f"echo: {text}"), delay=0.3 if text == "one" else 0)

    fake_llm.responder = slow_first
    updates = [payload("tg_private_text.json", update_id=902347200 + i, text=text)
               for i, text in enumerate(["one", "two", "three"])]
    for update in updates:  # each acked at once, while the first is still being answered
        assert (await post_update(tg, update)).status == 200
    sent = await fake_telegram.wait_for_messages(3)
    assert [c.params["text"] for c in sent] == ["echo: one", "echo: two", "echo: three"]
    # the second turn saw the first one's exchange: they ran one after the other
    assert [m["content"] for m in fake_llm.chat_requests[1].messages[1:]] == [
        "one", "echo: one", "two"]


async def test_commands_pin_list_forget_and_clear(
        tg: Harness, fake_telegram: FakeTelegram, fake_llm: FakeLLM) -> None:
    texts = ["/remember name Ada Lovelace", "/memory", "/usage", "/forget name", "/memory",
             "/new", "/start"]
    for i, text in enumerate(texts):
        await post_update(tg, payload("tg_private_text.json", update_id=902347300 + i,
                                      text=text))
    sent = await fake_telegram.wait_for_messages(len(texts))
    answers = [c.params["text"] for c in sent]
    assert answers[0] == "Pinned name."
    assert answers[1] == "Pinned facts:\n• name: Ada Lovelace"
    assert answers[2].startswith("Plan: free. AI credits left: 1000.")
    assert answers[3] == "Forgot name."
    assert answers[4].startswith("Nothing is pinned")
    assert answers[5].startswith("Started a new conversation")
    assert "remember KEY VALUE" in answers[6]
    assert fake_llm.requests == []  # commands never call the model


async def test_long_reply_is_split_under_4096_characters(
        tg: Harness, fake_telegram: FakeTelegram, fake_llm: FakeLLM) -> None:
    long_text = " ".join(f"word{i}" for i in range(2000))  # ~14,000 characters
    fake_llm.script = [Scripted(body=completion(long_text))]
    await post_update(tg, payload("tg_private_text.json"))
    await asyncio.wait_for(_until(lambda: " ".join(fake_telegram.texts()) == long_text), 5)
    assert len(fake_telegram.texts()) >= 4
    assert all(len(t) <= 4096 for t in fake_telegram.texts())


async def _until(predicate: Callable[[], bool]) -> None:
    while not predicate():
        await asyncio.sleep(0.01)  # bounded by the caller's wait_for


async def test_a_429_is_retried_and_the_agent_is_not_rerun(
        tg: Harness, fake_telegram: FakeTelegram, fake_llm: FakeLLM) -> None:
    fake_telegram.fail_next["sendMessage"] = [(429, {
        "ok": False, "error_code": 429, "description": "Too Many Requests: retry after 0",
        "parameters": {"retry_after": 0}})]
    await post_update(tg, payload("tg_private_text.json"))
    await asyncio.wait_for(_until(lambda: len(fake_telegram.calls_to("sendMessage")) == 2), 5)
    await tg.gateway.drain()
    assert fake_telegram.texts() == ["echo: Hi! What's on my list today?"] * 2
    assert len(fake_llm.chat_requests) == 1


async def test_provider_failure_gets_an_apology_and_charges_nothing(
        start_telegram: Callable[..., Awaitable[Harness]], fake_telegram: FakeTelegram,
        fake_llm: FakeLLM) -> None:
    tg = await start_telegram(llm_max_retries=0)
    fake_llm.script = [Scripted(status=500, body={"error": {"message": "boom"}})]
    await post_update(tg, payload("tg_private_text.json"))
    [sent] = await fake_telegram.wait_for_messages(1)
    assert sent.params["text"] == PROVIDER_APOLOGY
    await tg.gateway.drain()
    ledger = await tg.gateway.store.ledger(f"telegram:{ADA}")
    assert [row.kind for row in ledger] == ["grant"]
    assert await tg.gateway.store.get_thread(f"telegram:{ADA}") is None


async def test_unknown_sender_is_refused_politely_without_auto_provisioning(
        start_telegram: Callable[..., Awaitable[Harness]], fake_telegram: FakeTelegram,
        fake_llm: FakeLLM) -> None:
    tg = await start_telegram(auto_provision=False)
    await post_update(tg, payload("tg_private_text.json"))
    [sent] = await fake_telegram.wait_for_messages(1)
    assert "registered accounts only" in sent.params["text"]
    assert fake_llm.requests == []
    assert await tg.gateway.store.get_user(f"telegram:{ADA}") is None


async def test_channel_thread_is_reachable_by_its_owner_only_through_the_api(
        tg: Harness, fake_telegram: FakeTelegram) -> None:
    await post_update(tg, payload("tg_private_text.json"))
    await fake_telegram.wait_for_messages(1)
    await tg.gateway.drain()
    owner = {"Authorization": f"Bearer {await tg.gateway.accounts.issue_token(f'telegram:{ADA}')}"}
    other = await tg.user("bob")
    response = await tg.client.get(f"/api/threads/telegram:{ADA}", headers=owner)
    assert response.status == 200
    assert (await response.json())["channel"] == "telegram"
    response = await tg.client.get(f"/api/threads/telegram:{ADA}", headers=other)
    assert response.status == 404
    response = await tg.client.get("/api/user/memory", params={"threadId": f"telegram:{ADA}"},
                                   headers=other)
    assert response.status == 404


async def test_polling_mode_answers_updates_and_stops_cleanly(
        start_telegram: Callable[..., Awaitable[Harness]], fake_telegram: FakeTelegram,
        fake_llm: FakeLLM) -> None:
    tg = await start_telegram(telegram_webhook_secret="")
    assert (await tg.client.post("/telegram/webhook", json={})).status == 404  # no webhook
    # PTB clears any webhook before polling (once this process holds the polling role)
    await until(lambda: bool(fake_telegram.calls_to("deleteWebhook")))
    await fake_telegram.updates.put(payload("tg_private_text.json"))
    [sent] = await fake_telegram.wait_for_messages(1)
    assert sent.params["text"] == "echo: Hi! What's on my list today?"
    await tg.client.close()
    channel = tg.gateway.channels["telegram"]
    assert getattr(channel, "bot", None) is None


async def test_stop_and_start_leaves_exactly_one_listener(
        start_telegram: Callable[..., Awaitable[Harness]], fake_telegram: FakeTelegram,
        fake_llm: FakeLLM) -> None:
    tg = await start_telegram(telegram_webhook_secret="")
    channel = tg.gateway.channels["telegram"]
    await channel.stop()
    await channel.start()
    await channel.start()  # starting twice is a no-op, never a second poller
    fake_telegram.most_concurrent_polls = fake_telegram.polling_now
    polls = fake_telegram.polls
    await asyncio.wait_for(_until(lambda: fake_telegram.polls >= polls + 3), 5)
    assert fake_telegram.most_concurrent_polls == 1
    await fake_telegram.updates.put(payload("tg_private_text.json"))
    await fake_telegram.updates.put(payload("tg_private_text.json", update_id=902347011,
                                            text="second"))
    sent = await fake_telegram.wait_for_messages(2)
    await tg.gateway.drain()
    assert [c.params["text"] for c in sent] == ["echo: Hi! What's on my list today?",
                                               "echo: second"]
    assert len(fake_llm.chat_requests) == 2


async def test_typing_shows_only_when_the_reply_takes_longer_than_a_second(
        tg: Harness, fake_telegram: FakeTelegram, fake_llm: FakeLLM) -> None:
    tg.gateway.inbox.typing_delay_seconds = 0.3  # one second in production
    await post_update(tg, payload("tg_private_text.json"))  # answered at once
    await fake_telegram.wait_for_messages(1)
    fake_llm.script = [Scripted(body=completion("took a while"), delay=0.6)]
    await post_update(tg, payload("tg_private_text.json", update_id=902347700))
    await fake_telegram.wait_for_messages(2)
    await tg.gateway.drain()
    assert len(fake_telegram.calls_to("sendChatAction")) == 1  # the slow one only
