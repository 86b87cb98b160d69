"""Channels and the durable inbox, in process: what a platform hears when a message cannot be
stored, and one Slack message arriving as two events."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gateway.config.settings import DEFAULT_PLANS, Plan
from gateway.store import InboxEntry
from gateway.testing.fake_llm import FakeLLM
from gateway.testing.slack import BOT_USER_ID, SIGNING_SECRET, FakeSlack, event_body, sign
from gateway.testing.telegram import SECRET, FakeTelegramChats
from tests.conftest import Harness
from tests.fakes.loop import LoopChannel
from tests.helpers import assert_json_error, reopened_store

StartGateway = Callable[..., Awaitable[Harness]]


def break_inbox(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make the inbox refuse writes as a locked database would (``monkeypatch.undo()`` mends
    it); return the list of refused message ids."""
    refused: list[str] = []

    async def locked(entry: InboxEntry, answered: bool = False) -> int | None:
        refused.append(entry.message_id)
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(harness.gateway.store, "inbox_add", locked)
    return refused


def private_update(update_id: int, text: str) -> dict[str, Any]:
    return {"update_id": update_id, "message": {
        "message_id": update_id, "date": 1767225600, "text": text,
        "chat": {"id": 42, "type": "private", "first_name": "Ada"},
        "from": {"id": 42, "is_bot": False, "first_name": "Ada"}}}


async def test_telegram_hears_503_when_the_message_cannot_be_stored_and_later_redelivery_works(
        tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM,
        monkeypatch: pytest.MonkeyPatch) -> None:
    refused = break_inbox(tg, monkeypatch)
    headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
    response = await tg.client.post("/telegram/webhook", json=private_update(7001, "hello"),
                                    headers=headers)
    await assert_json_error(response, 503, "unavailable")
    assert refused == ["7001"]
    await tg.gateway.drain()
    assert fake_llm.requests == []  # not taken: nothing ran

    monkeypatch.undo()  # Telegram sends it again after a 5xx
    response = await tg.client.post("/telegram/webhook", json=private_update(7001, "hello"),
                                    headers=headers)
    assert response.status == 200
    await fake_telegram.wait_for_messages(1)
    assert fake_telegram.texts() == ["echo: hello"]


def dm_events(text: str, ts: str) -> tuple[bytes, bytes]:
    """One DM with a mention, as Slack sends it twice: ``message.im`` and ``app_mention``."""
    channel, user = "D0LAN2Q65", "U061F7AUR"
    message = event_body({"type": "message", "channel_type": "im", "channel": channel,
                          "user": user, "text": f"<@{BOT_USER_ID}> {text}", "ts": ts},
                         "Ev-message")
    mention = event_body({"type": "app_mention", "channel": channel, "user": user,
                          "text": f"<@{BOT_USER_ID}> {text}", "ts": ts}, "Ev-mention")
    return message, mention


@pytest.mark.parametrize("mention_first", [False, True])
async def test_a_dm_arriving_as_message_and_app_mention_is_answered_and_billed_once(
        mention_first: bool, slack: Harness, fake_slack: FakeSlack,
        fake_llm: FakeLLM) -> None:
    message, mention = dm_events("what is 2+2?", "1767226000.000100")
    bodies = [mention, message] if mention_first else [message, mention]
    answers = await asyncio.gather(*(slack.client.post(
        "/slack/events", data=body, headers=sign(SIGNING_SECRET, body)) for body in bodies))
    assert [answer.status for answer in answers] == [200, 200]
    await fake_slack.wait_for("chat.postMessage", 1)
    await slack.gateway.drain()
    posted = fake_slack.calls_to("chat.postMessage")
    assert [(call.params["channel"], call.params["text"]) for call in posted] == [
        ("D0LAN2Q65", "echo: what is 2+2?")]
    assert "thread_ts" not in posted[0].params  # the DM's conversation, not a thread
    assert len(fake_llm.chat_requests) == 1
    ledger = await slack.gateway.store.ledger("slack:T0G9PQBBK:U061F7AUR")
    assert [row.kind for row in ledger].count("chat") == 1


async def test_slack_hears_503_when_the_event_cannot_be_stored(
        slack: Harness, fake_slack: FakeSlack, monkeypatch: pytest.MonkeyPatch) -> None:
    refused = break_inbox(slack, monkeypatch)
    message, _ = dm_events("hello", "1767226000.000200")
    response = await slack.client.post("/slack/events", data=message,
                                       headers=sign(SIGNING_SECRET, message))
    await assert_json_error(response, 503, "unavailable")
    assert refused == ["D0LAN2Q65:1767226000.000200"]
    monkeypatch.undo()
    retried = await slack.client.post("/slack/events", data=message,
                                      headers={**sign(SIGNING_SECRET, message),
                                               "X-Slack-Retry-Num": "1"})
    assert retried.status == 200
    await fake_slack.wait_for("chat.postMessage", 1)
    assert [c.params["text"] for c in fake_slack.calls_to("chat.postMessage")] == ["echo: hello"]


async def test_a_channel_message_waiting_on_the_rate_limit_stays_in_the_inbox_at_stop(
        loop: LoopChannel, start_clocked: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_clocked(default_plan="tiny", plans={
        **DEFAULT_PLANS, "tiny": Plan("tiny", 1000, 0, 30, 1)})
    await harness.gateway.receive(loop.message("m1", "first"))
    await harness.gateway.receive(loop.message("m2", "second"))  # over the limit: waits
    await loop.wait_for(1)
    await harness.client.close()  # the stop does not wait out the minute
    assert loop.texts() == ["echo: first"]
    async with reopened_store(harness.gateway.settings) as store:
        assert [entry.message_id for entry in await store.inbox_pending()] == ["m2"]


async def test_a_slack_event_nobody_listens_to_is_acknowledged_not_refused(
        slack: Harness, fake_slack: FakeSlack) -> None:
    body = event_body({"type": "app_home_opened", "user": "U061F7AUR", "channel": "D0LAN2Q65",
                       "tab": "home", "event_ts": "1767226000.000300"}, "Ev-home")
    response = await slack.client.post("/slack/events", data=body,
                                       headers=sign(SIGNING_SECRET, body))
    assert response.status == 200  # a 404 would make Slack retry, then drop the subscription
    assert fake_slack.calls_to("chat.postMessage") == []
