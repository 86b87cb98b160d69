"""The webhook's fast path (``plain_private_text``): a plain private text read straight from
its JSON gives exactly what python-telegram-bot's ``Update`` path gives, and any other update
is left to that path."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from telegram import Update

from channels.telegram.adapter import TelegramChannel, plain_private_text
from gateway.testing.telegram import SECRET, FakeTelegramChats
from tests.conftest import Harness

PAYLOADS = Path(__file__).parent / "payloads"
PRIVATE = json.loads((PAYLOADS / "tg_private_text.json").read_text())


def private(**changes: Any) -> dict[str, Any]:
    """The private text update with ``changes`` to its message (None removes a key)."""
    update = copy.deepcopy(PRIVATE)
    for key, value in changes.items():
        if value is None:
            update["message"].pop(key, None)
        else:
            update["message"][key] = value
    return update


PLAIN = {
    "payload": PRIVATE,
    "indented-code": private(text="\n\n    def f():\n        return 1\n\n"),
    "spaces-around": private(text="  hello there  "),
    "emoji": private(text="🎉 party 🎉 with ✓ and 中文"),
    "long": private(text="word " * 900),
    "minimal-user": private(**{"from": {"id": 5, "is_bot": False, "first_name": "B"}}),
    "slash-inside": private(text="and/or, not a /command"),
}
NOT_PLAIN = {
    "command": private(text="/start"),
    "other-command": private(text="/weather today"),
    "mention-entity": private(text="@gateway_test_bot hi",
                              entities=[{"type": "mention", "offset": 0, "length": 17}]),
    "url-entity": private(text="see https://example.com",
                          entities=[{"type": "url", "offset": 4, "length": 19}]),
    "blank": private(text="   "),
    "empty": private(text=""),
    "no-text": private(text=None),
    "photo": private(text=None, caption="a cat", photo=[{
        "file_id": "f1", "file_unique_id": "u1", "width": 90, "height": 90}]),
    "topic": private(message_thread_id=3, is_topic_message=True),
    "reply": private(reply_to_message={"message_id": 1, "date": 1767225500, "chat": {
        "id": 777000111, "type": "private"}, "text": "earlier"}),
    "bot-sender": private(**{"from": {"id": 5, "is_bot": True, "first_name": "Bot"}}),
    "no-first-name": private(**{"from": {"id": 5, "is_bot": False}}),
    "string-chat-id": private(chat={"id": "777000111", "type": "private"}),
    "group": json.loads((PAYLOADS / "tg_group_text.json").read_text()),
    "forum-topic": json.loads((PAYLOADS / "tg_forum_topic_text.json").read_text()),
    "edited": json.loads((PAYLOADS / "tg_edited_message.json").read_text()),
    "photo-payload": json.loads((PAYLOADS / "tg_photo.json").read_text()),
    "lone-surrogate": private(text="broken \ud800 text"),
    "no-date": private(date=None),
    "huge-date": private(date=10**15),
    "bool-message-id": private(message_id=True),
    "extra-update-field": {**PRIVATE, "edited_message": PRIVATE["message"]},
}


def channel_of(harness: Harness) -> TelegramChannel:
    channel = harness.gateway.channels["telegram"]
    assert isinstance(channel, TelegramChannel) and channel.bot is not None
    return channel


@pytest.mark.parametrize("name", PLAIN)
async def test_a_plain_private_text_reads_as_ptb_reads_it(tg: Harness, name: str) -> None:
    channel = channel_of(tg)
    assert channel.bot is not None
    update = PLAIN[name]
    fast = plain_private_text(update)
    assert fast is not None
    assert fast == channel.to_inbound(Update.de_json(copy.deepcopy(update), channel.bot),
                                      channel.bot)


@pytest.mark.parametrize("name", NOT_PLAIN)
def test_any_other_update_is_left_to_ptb(name: str) -> None:
    assert plain_private_text(NOT_PLAIN[name]) is None


async def test_the_webhook_answers_a_plain_and_a_refused_update_as_before(
        tg: Harness, fake_telegram: FakeTelegramChats) -> None:
    headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
    ok = await tg.client.post("/telegram/webhook", json=PRIVATE, headers=headers)
    assert ok.status == 200
    await fake_telegram.wait_for_messages(1)
    broken = await tg.client.post("/telegram/webhook", headers={
        **headers, "Content-Type": "application/json"},
        data=json.dumps(NOT_PLAIN["no-first-name"]).encode())
    assert broken.status == 400
    assert (await broken.json())["error"]["code"] == "invalid_update"
