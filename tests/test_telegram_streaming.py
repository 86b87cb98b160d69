"""Telegram shows the reply growing while the model writes: a message draft in a private chat
(then the reply is sent), one message edited in a group (the reply is its last edit)."""

from __future__ import annotations

import itertools

from gateway.testing.fake_llm import FakeLLM, Scripted, completion
from gateway.testing.telegram import BOT_USERNAME, FakeTelegramChats, sent_entities
from tests.conftest import Harness
from tests.helpers import until
from tests.test_telegram import post_update
from tests.test_telegram_groups_and_lifecycle import GROUP, group_update, private_update

REPLY = ("Here is **the plan**: first we gather the numbers, then we compare them with last "
         "quarter, and finally we write it up for the whole team.")
FINAL = ("Here is the plan: first we gather the numbers, then we compare them with last "
         "quarter, and finally we write it up for the whole team.")


def streaming(tg: Harness, fake_llm: FakeLLM, text: str = REPLY) -> None:
    tg.gateway.inbox.preview_interval_seconds = 0.05
    fake_llm.script = [Scripted(body=completion(text), piece_chars=12, piece_delay=0.03)]


async def test_a_private_chat_sees_a_growing_draft_then_the_reply(
        tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM) -> None:
    streaming(tg, fake_llm)
    await post_update(tg, private_update(902349001, "what is the plan?"))
    [sent] = await fake_telegram.wait_for_messages(1)
    await tg.gateway.drain()
    drafts = fake_telegram.calls_to("sendMessageDraft")
    assert len(drafts) >= 2
    assert {call.params["draft_id"] for call in drafts} == {drafts[0].params["draft_id"]}
    texts = [call.params["text"] for call in drafts]
    assert all(FINAL.startswith(text) for text in texts)
    assert all(len(a) < len(b) for a, b in itertools.pairwise(texts))
    assert sent.params["text"] == FINAL  # the reply persists the draft, formatted
    assert sent_entities(sent)[0]["type"] == "bold"
    assert fake_telegram.calls_to("editMessageText") == []


async def test_a_group_sees_one_message_edited_into_the_reply(
        tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM) -> None:
    streaming(tg, fake_llm)
    await post_update(tg, group_update(902349002, f"@{BOT_USERNAME} the plan?", entities=True))
    await until(lambda: len(fake_telegram.calls_to("editMessageText")) >= 2, timeout=10)
    await tg.gateway.drain()
    [preview] = fake_telegram.calls_to("sendMessage")  # one message in the chat
    assert int(preview.params["chat_id"]) == GROUP
    edits = fake_telegram.calls_to("editMessageText")
    assert {int(call.params["message_id"]) for call in edits} == \
        {next(iter(fake_telegram.chat_of))}
    assert edits[-1].params["text"] == FINAL
    assert sent_entities(edits[-1])[0]["type"] == "bold"
    assert fake_telegram.calls_to("sendMessageDraft") == []


async def test_a_deleted_preview_is_replaced_by_a_new_message(
        tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM) -> None:
    streaming(tg, fake_llm)
    await post_update(tg, group_update(902349003, f"@{BOT_USERNAME} the plan?", entities=True))
    await until(lambda: len(fake_telegram.calls_to("sendMessage")) == 1, timeout=10)
    fake_telegram.deleted.update(fake_telegram.chat_of)  # a member deletes the preview
    await fake_telegram.wait_for_messages(2, timeout=10)
    await tg.gateway.drain()
    assert fake_telegram.calls_to("sendMessage")[-1].params["text"] == FINAL


async def test_a_fast_reply_is_one_message_and_no_preview(
        tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM) -> None:
    fake_llm.script = [Scripted(body=completion("quick"))]
    await post_update(tg, group_update(902349004, f"@{BOT_USERNAME} hi", entities=True))
    await fake_telegram.wait_for_messages(1)
    await tg.gateway.drain()
    assert [c.params["text"] for c in fake_telegram.calls_to("sendMessage")] == ["quick"]
    assert fake_telegram.calls_to("editMessageText") == []
    assert fake_telegram.calls_to("sendMessageDraft") == []
