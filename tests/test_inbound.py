"""The channel kit: ordering, de-duplication, delivery retries, the reply_sent hook."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gateway import hookimpl
from gateway.inbound import (
    Command,
    DeliveryFailed,
    DeliveryRetry,
    InboundMessage,
    split_text,
)
from gateway.plugins import PluginManager
from gateway.testing.fake_llm import FakeLLM
from tests.conftest import Harness


class Outbox:
    """Where a test channel's replies land; can be told to fail first."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []
        self.failures: list[Exception] = []
        self.arrived = asyncio.Event()

    def message(self, message_id: str, text: str, conversation: str = "loop:c1",
                **extra: Any) -> InboundMessage:
        async def reply(chunk: str) -> None:
            if self.failures:
                raise self.failures.pop(0)
            self.sent.append((message_id, chunk))
            self.arrived.set()

        return InboundMessage(channel="loop", conversation=conversation, sender="loop:ada",
                              message_id=message_id, text=text, reply=reply, **extra)

    async def wait_for(self, count: int) -> list[tuple[str, str]]:
        async def enough() -> None:
            while len(self.sent) < count:
                self.arrived.clear()
                await self.arrived.wait()
        await asyncio.wait_for(enough(), 5)
        return self.sent


class SentLog:
    def __init__(self) -> None:
        self.replies: list[tuple[str, str]] = []

    @hookimpl
    def reply_sent(self, message: InboundMessage, text: str) -> None:
        self.replies.append((message.message_id, text))


@pytest.fixture
def sent_log(pm: PluginManager) -> SentLog:
    log = SentLog()
    pm.register(log, name="sent-log")
    return log


async def test_reply_sent_observes_each_delivered_reply(
        sent_log: SentLog, start_gateway: Callable[..., Awaitable[Harness]]) -> None:
    harness = await start_gateway()
    outbox = Outbox()
    harness.gateway.receive(outbox.message("m1", "hello"))
    await outbox.wait_for(1)
    await harness.gateway.drain()
    assert sent_log.replies == [("m1", "echo: hello")]


async def test_messages_of_one_conversation_run_in_arrival_order(
        harness: Harness, fake_llm: FakeLLM) -> None:
    outbox = Outbox()
    for i in range(5):
        harness.gateway.receive(outbox.message(f"m{i}", f"text {i}"))
    sent = await outbox.wait_for(5)
    assert [text for _, text in sent] == [f"echo: text {i}" for i in range(5)]


async def test_a_redelivered_message_is_answered_once(harness: Harness,
                                                      fake_llm: FakeLLM) -> None:
    outbox = Outbox()
    for _ in range(3):
        harness.gateway.receive(outbox.message("same-id", "hello"))
    await harness.gateway.drain()
    assert outbox.sent == [("same-id", "echo: hello")]
    assert len(fake_llm.chat_requests) == 1


async def test_delivery_is_retried_and_never_reruns_the_agent(
        harness: Harness, fake_llm: FakeLLM) -> None:
    outbox = Outbox()
    harness.gateway.inbox.backoff_seconds = 0.01
    outbox.failures = [DeliveryRetry(0), ConnectionResetError("dropped")]
    harness.gateway.receive(outbox.message("m1", "hello"))
    await harness.gateway.drain()
    assert outbox.sent == [("m1", "echo: hello")]
    assert len(fake_llm.chat_requests) == 1


async def test_a_futile_delivery_is_given_up_at_once(
        sent_log: SentLog, start_gateway: Callable[..., Awaitable[Harness]],
        fake_llm: FakeLLM) -> None:
    harness = await start_gateway()
    outbox = Outbox()
    outbox.failures = [DeliveryFailed("bot was blocked")]
    harness.gateway.receive(outbox.message("m1", "hello"))
    await harness.gateway.drain()
    assert outbox.sent == []
    assert sent_log.replies == []
    # the turn itself is stored: a later redelivery is not answered again
    harness.gateway.receive(outbox.message("m1", "hello"))
    await harness.gateway.drain()
    assert len(fake_llm.chat_requests) == 1


async def test_only_known_messages_wait_for_an_existing_conversation(
        harness: Harness, fake_llm: FakeLLM) -> None:
    outbox = Outbox()
    harness.gateway.receive(outbox.message("m1", "side remark", only_known=True))
    await harness.gateway.drain()
    assert outbox.sent == []
    harness.gateway.receive(outbox.message("m2", "hello"))
    harness.gateway.receive(outbox.message("m3", "follow-up", only_known=True))
    await harness.gateway.drain()
    assert [text for _, text in outbox.sent] == ["echo: hello", "echo: follow-up"]


async def test_notice_and_commands_never_call_the_model(harness: Harness,
                                                        fake_llm: FakeLLM) -> None:
    outbox = Outbox()
    harness.gateway.receive(outbox.message("m1", "", notice="text only, please"))
    harness.gateway.receive(outbox.message("m2", "", command=Command("remember", "pet Rex")))
    harness.gateway.receive(outbox.message("m3", "", command=Command("bogus")))
    await harness.gateway.drain()
    texts = [text for _, text in outbox.sent]
    assert texts[0] == "text only, please"
    assert texts[1] == "Pinned pet."
    assert texts[2].startswith("Unknown command 'bogus'")
    assert fake_llm.requests == []


@pytest.mark.parametrize("limit", [10, 50, 4096])
def test_split_text_keeps_every_word_under_the_limit(limit: int) -> None:
    text = "\n\n".join(" ".join(f"w{i}x{j}" for j in range(60)) for i in range(30))
    chunks = split_text(text, limit)
    assert all(0 < len(chunk) <= limit for chunk in chunks)
    assert " ".join(" ".join(chunks).split()) == " ".join(text.split())


def test_split_text_cuts_a_word_longer_than_the_limit() -> None:
    assert split_text("a" * 25, 10) == ["a" * 10, "a" * 10, "a" * 5]
    assert split_text("", 10) == [""]
