"""Discord replies: split under 2,000 characters with code blocks closed and reopened, rate
limits (discord.py's buckets, 429s it waits out, 429s the outbox waits out), refusals,
streaming by editing one message, and pictures for a vision model."""

from __future__ import annotations

import base64
import itertools

from gateway.testing.discord import (
    BOT_ID,
    CHANNEL_ID,
    MAX_CONTENT,
    Bucket,
    FakeDiscord,
)
from gateway.testing.fake_llm import FakeLLM, Scripted, completion
from tests.conftest import Harness
from tests.helpers import until

SEND = "POST /channels/{id}/messages"
EDIT = "PATCH /channels/{id}/messages/{message}"
PNG = b"\x89PNG\r\n\x1a\n" + b"discord-picture" * 20


def long_reply() -> str:
    prose = " ".join(f"word{n}" for n in range(300))  # ~2,300 characters, no line break
    code = "\n".join(f"    line_{n} = compute({n})  # a comment" for n in range(80))
    return f"Intro paragraph.\n\n{prose}\n\n```python\n{code}\n```\n\nThat is all <@{BOT_ID}>."


async def test_a_long_reply_is_split_under_2000_with_code_blocks_closed_and_reopened(
        dc: Harness, fake_discord: FakeDiscord, fake_llm: FakeLLM) -> None:
    reply = long_reply()
    fake_llm.script = [Scripted(body=completion(reply))]
    question = await fake_discord.message(f"<@{BOT_ID}> write a lot")
    await until(lambda: "That is all" in "".join(fake_discord.texts()))
    await dc.gateway.drain()
    texts = fake_discord.texts()
    assert len(texts) >= 3 and all(len(text) <= MAX_CONTENT for text in texts)
    assert all(text.count("```") % 2 == 0 for text in texts)  # every chunk renders alone
    cut = next(n for n, t in enumerate(texts) if "```python" in t and t.count("```") == 2
           and t.endswith("\n```") and "That is all" not in t)  # the block was cut...
    assert texts[cut + 1].startswith("```python\n")  # ...and reopened with its language
    assert texts[1].startswith("word")  # the prose was cut at a space, not inside a word
    assert all(m["allowed_mentions"] == {"parse": []} for m in fake_discord.sent)
    assert all(m["message_reference"]["message_id"] == question["id"]
               for m in fake_discord.sent)
    rejoined = "".join(texts).replace("\n```", "").replace("```python\n", "")
    assert "".join(reply.split()).replace("```", "").replace("python", "") == \
        "".join(rejoined.split()).replace("```", "").replace("python", "")


async def test_a_429_discord_py_waits_out_loses_nothing(
        dc: Harness, fake_discord: FakeDiscord) -> None:
    fake_discord.rate_limit(SEND, times=2, retry_after=0.05)
    await fake_discord.message(f"<@{BOT_ID}> hi")
    await fake_discord.wait_for_messages(1)
    await dc.gateway.drain()
    assert fake_discord.texts() == ["echo: hi"]
    assert len(fake_discord.calls_to(SEND)) == 3


async def test_a_429_discord_py_gives_up_on_goes_back_to_the_outbox_and_is_sent_later(
        dc: Harness, fake_discord: FakeDiscord, fake_llm: FakeLLM) -> None:
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    dc.gateway.outbox.wait = record
    fake_discord.rate_limit(SEND, times=1, retry_after=45.0)  # over discord.py's 30 s
    await fake_discord.message(f"<@{BOT_ID}> hello")
    await fake_discord.wait_for_messages(1)
    await dc.gateway.drain()
    assert fake_discord.texts() == ["echo: hello"]  # once: nothing lost, nothing doubled
    assert len(waits) == 1 and 45.0 <= waits[0] <= 45.0 * 1.1
    assert len(fake_llm.chat_requests) == 1


async def test_429s_past_discord_py_s_five_tries_are_retried_by_the_outbox(
        dc: Harness, fake_discord: FakeDiscord) -> None:
    dc.gateway.outbox.backoff_seconds = 0.01
    fake_discord.rate_limit(SEND, times=6, retry_after=0.01)
    await fake_discord.message(f"<@{BOT_ID}> persist")
    await fake_discord.wait_for_messages(1, timeout=20)
    await dc.gateway.drain()
    assert fake_discord.texts() == ["echo: persist"]


async def test_the_bucket_is_followed_so_a_burst_meets_no_429(
        dc: Harness, fake_discord: FakeDiscord, fake_llm: FakeLLM) -> None:
    fake_discord.buckets[SEND] = Bucket(limit=2, per=0.4)
    fake_llm.script = [Scripted(body=completion("\n\n".join(
        f"paragraph {n} " + "x" * 1500 for n in range(5))))]
    await fake_discord.message(f"<@{BOT_ID}> five long paragraphs")
    await fake_discord.wait_for_messages(5)
    await dc.gateway.drain()
    assert len(fake_discord.sent) == 5
    assert (SEND, 429) not in fake_discord.refused


async def test_a_channel_the_bot_may_not_post_in_is_given_up_at_once(
        dc: Harness, fake_discord: FakeDiscord) -> None:
    dc.gateway.outbox.backoff_seconds = 0.01
    fake_discord.forbidden.add(CHANNEL_ID)
    question = await fake_discord.message(f"<@{BOT_ID}> hello?")
    await until(lambda: len(fake_discord.calls_to(SEND)) == 1)
    await dc.gateway.drain()
    assert len(fake_discord.calls_to(SEND)) == 1  # one attempt, no retry storm
    [delivery] = [d for d in await dc.gateway.store.deliveries(limit=10)
                  if d.message_id == question["id"]]
    assert delivery.state == "failed" and "403" in (delivery.last_error or "")


async def test_a_streamed_reply_is_one_message_edited_then_finished(
        dc: Harness, fake_discord: FakeDiscord, fake_llm: FakeLLM) -> None:
    dc.gateway.inbox.preview_interval_seconds = 0.05
    reply = ("Here is **the plan**: first we gather the numbers, then we compare them with "
             "last quarter, and finally we write it up. @everyone should read it.")
    fake_llm.script = [Scripted(body=completion(reply), piece_chars=12, piece_delay=0.03)]
    await fake_discord.message(f"<@{BOT_ID}> the plan?")
    await until(lambda: fake_discord.texts() == [reply])
    await dc.gateway.drain()
    assert len(fake_discord.calls_to(SEND)) == 1
    edits = fake_discord.calls_to(EDIT)
    assert len(edits) >= 2
    previews = [fake_discord.calls_to(SEND)[0].body["content"]] + \
        [call.body["content"] for call in edits]
    assert all(len(a) <= len(b) for a, b in itertools.pairwise(previews))
    assert previews[-1] == reply
    assert all(call.body["allowed_mentions"] == {"parse": []} for call in edits)
    assert fake_discord.pinged(fake_discord.sent[0]) == {"everyone": [], "users": [],
                                                         "roles": []}


async def test_a_picture_reaches_a_vision_model(
        start_discord: Harness, fake_discord: FakeDiscord, fake_llm: FakeLLM) -> None:
    harness = await start_discord(llm_vision=True)  # type: ignore[operator]
    picture = fake_discord.attachment("cat.png", "image/png", PNG)
    await fake_discord.message(f"<@{BOT_ID}> what breed?", attachments=[picture])
    await fake_discord.wait_for_messages(1)
    await harness.gateway.drain()
    assert fake_discord.downloads == [f"{picture['id']}/cat.png"]
    content = fake_llm.chat_requests[-1].messages[-1]["content"]
    assert content[0] == {"type": "text", "text": "[image: cat.png] what breed?"}
    assert content[1]["image_url"]["url"] == \
        "data:image/png;base64," + base64.b64encode(PNG).decode()


async def test_a_picture_over_the_cap_is_not_downloaded(
        start_discord: Harness, fake_discord: FakeDiscord, fake_llm: FakeLLM) -> None:
    harness = await start_discord(llm_vision=True,  # type: ignore[operator]
                                  llm_max_image_bytes=100)
    picture = fake_discord.attachment("cat.png", "image/png", PNG)
    await fake_discord.message(f"<@{BOT_ID}> look", attachments=[picture])
    await fake_discord.wait_for_messages(1)
    await harness.gateway.drain()
    assert fake_llm.chat_requests[-1].messages[-1]["content"] == "[image: cat.png] look"


async def test_without_vision_a_picture_alone_gets_the_text_only_note(
        dc: Harness, fake_discord: FakeDiscord, fake_llm: FakeLLM) -> None:
    picture = fake_discord.attachment("cat.png", "image/png", PNG)
    await fake_discord.message(f"<@{BOT_ID}>", attachments=[picture])
    [sent] = await fake_discord.wait_for_messages(1)
    assert sent["content"].startswith("I can only read text")
    assert fake_llm.chat_requests == [] and fake_discord.downloads == []
