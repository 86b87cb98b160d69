"""More of the channel kit: failures that must not block a conversation, summarization, and
what a gateway stop does to queued work.

The in-test ``loop`` channel (tests/fakes/loop.py) hands InboundMessages to a real gateway on
the fake LLM. Waits are bounded polls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from gateway import hookimpl
from gateway.interfaces import DeliveryRetry
from gateway.kit.inbound import NOT_PROVISIONED, PROVIDER_APOLOGY
from gateway.plugins.manager import PluginManager
from gateway.store import Delivery
from gateway.testing.fake_llm import FakeLLM, Recorded, Scripted, completion
from tests.conftest import Harness
from tests.fakes.loop import LoopChannel
from tests.helpers import stop_while_held, until


@pytest.fixture
async def harness(loop: LoopChannel, start_gateway: Callable[..., Awaitable[Harness]]
                  ) -> Harness:
    """A gateway with the ``loop`` channel."""
    return await start_gateway()


def last_user_text(request: Recorded) -> str:
    return str(request.messages[-1]["content"])


async def test_a_provider_failure_does_not_block_the_next_message(
        loop: LoopChannel, start_gateway: Callable[..., Awaitable[Harness]],
        fake_llm: FakeLLM) -> None:
    harness = await start_gateway(llm_max_retries=0)
    fake_llm.script = [Scripted(status=500, body={"error": {"message": "boom"}})]
    await harness.gateway.receive(loop.message("m1", "first"))
    await harness.gateway.receive(loop.message("m2", "second"))
    await until(lambda: len(loop.sent) == 2)
    await harness.gateway.drain()
    assert loop.texts() == [PROVIDER_APOLOGY, "echo: second"]
    ledger = await harness.gateway.store.ledger("loop:ada")
    assert [row.kind for row in ledger].count("chat") == 1  # the failed turn cost nothing
    _, messages = await harness.gateway.store.rolling_memory("loop:c1")
    assert [m.content for m in messages] == ["second", "echo: second"]


async def test_a_message_during_summarization_waits_and_sees_the_summary(
        loop: LoopChannel, start_gateway: Callable[..., Awaitable[Harness]],
        fake_llm: FakeLLM) -> None:
    harness = await start_gateway(summarize_at=4, keep_recent=2)

    release = asyncio.Event()

    def slow_summary(request: Recorded) -> Scripted:
        if request.is_summary:
            return Scripted(body=completion("SUMMARY[the first turn]"), release=release)
        return Scripted(body=completion(f"echo: {last_user_text(request)}"))

    fake_llm.responder = slow_summary
    await harness.gateway.receive(loop.message("m1", "one"))
    # the 4th stored message: summarize
    await harness.gateway.receive(loop.message("m2", "two"))
    await until(lambda: len(fake_llm.summary_requests) == 1)
    assert loop.texts() == ["echo: one", "echo: two"]  # answered before the summary is done
    await harness.gateway.receive(loop.message("m3", "three"))  # arrives while it runs
    release.set()
    await until(lambda: len(loop.sent) == 3)
    await harness.gateway.drain()
    kinds = ["summary" if r.is_summary else last_user_text(r) for r in fake_llm.requests]
    # (the turn of "three" makes 4 stored messages again: a second summarization follows)
    assert kinds[:4] == ["one", "two", "summary", "three"]
    third = fake_llm.requests[3]
    assert "SUMMARY[the first turn]" in third.system_text
    assert [m["content"] for m in third.messages[1:]] == ["two", "echo: two", "three"]
    assert loop.texts()[-1] == "echo: three"


async def test_gateway_stop_finishes_queued_work_of_every_conversation(
        loop: LoopChannel, harness: Harness, fake_llm: FakeLLM) -> None:

    release = asyncio.Event()

    def slow_first(request: Recorded) -> Scripted:
        text = last_user_text(request)
        return Scripted(body=completion(f"echo: {text}"),
                        release=release if text == "a1" else None)

    fake_llm.responder = slow_first
    for message_id in ("a1", "a2", "a3"):
        await harness.gateway.receive(loop.message(message_id, message_id,
                                                   conversation="loop:a"))
    await harness.gateway.receive(loop.message("b1", "b1", conversation="loop:b"))
    await until(lambda: any(last_user_text(r) == "a1" for r in fake_llm.requests))
    await stop_while_held(harness, release)  # Gateway.stop() while a1 runs, a2 and a3 wait
    assert loop.texts("loop:a") == ["echo: a1", "echo: a2", "echo: a3"]
    assert loop.texts("loop:b") == ["echo: b1"]
    assert harness.gateway.inbox.queues.pending() == 0


async def test_delivery_backoff_in_one_conversation_does_not_hold_up_another(
        loop: LoopChannel, harness: Harness, fake_llm: FakeLLM) -> None:
    harness.gateway.outbox.backoff_seconds = 0.01
    loop.failures["slow-1"] = [DeliveryRetry(1.0), DeliveryRetry(1.0)]  # 2 s of waiting
    await harness.gateway.receive(loop.message("slow-1", "first", conversation="loop:a"))
    await harness.gateway.receive(loop.message("slow-2", "second", conversation="loop:a"))
    await until(lambda: loop.attempts.get("slow-1", 0) == 1)
    await harness.gateway.receive(loop.message("other", "elsewhere", conversation="loop:b"))
    await until(lambda: loop.texts("loop:b") == ["echo: elsewhere"])
    assert loop.texts("loop:a") == []  # still waiting out the retry-after
    await until(lambda: len(loop.texts("loop:a")) == 2)
    assert loop.texts("loop:a") == ["echo: first", "echo: second"]  # order kept
    await harness.gateway.drain()
    assert len(fake_llm.chat_requests) == 3


async def test_redelivery_during_delivery_retries_is_answered_once(
        loop: LoopChannel, harness: Harness, fake_llm: FakeLLM) -> None:
    harness.gateway.outbox.backoff_seconds = 0.05
    loop.failures["m1"] = [ConnectionResetError("reset"), ConnectionResetError("reset")]
    await harness.gateway.receive(loop.message("m1", "hello"))
    await until(lambda: loop.attempts.get("m1", 0) == 1)
    # the platform redelivers meanwhile
    await harness.gateway.receive(loop.message("m1", "hello"))
    await harness.gateway.drain()
    assert loop.texts() == ["echo: hello"]
    assert len(fake_llm.chat_requests) == 1


async def test_a_too_long_message_is_refused_and_the_next_is_answered(
        loop: LoopChannel, start_gateway: Callable[..., Awaitable[Harness]],
        fake_llm: FakeLLM) -> None:
    harness = await start_gateway(max_message_chars=50)
    await harness.gateway.receive(loop.message("m1", "x" * 51))
    await harness.gateway.receive(loop.message("m2", "short"))
    await until(lambda: len(loop.sent) == 2)
    await harness.gateway.drain()
    assert loop.texts()[0].startswith("Sorry")
    assert loop.texts()[1] == "echo: short"
    assert [last_user_text(r) for r in fake_llm.requests] == ["short"]
    # the refused one is settled too: a redelivery is not answered again
    await harness.gateway.receive(loop.message("m1", "x" * 51))
    await harness.gateway.drain()
    assert len(loop.sent) == 2


async def test_unknown_sender_is_refused_once_without_auto_provisioning(
        loop: LoopChannel, start_gateway: Callable[..., Awaitable[Harness]],
        fake_llm: FakeLLM) -> None:
    harness = await start_gateway(auto_provision=False)
    for _ in range(2):  # the second is a redelivery
        await harness.gateway.receive(loop.message("m1", "hi", sender="loop:stranger"))
    await harness.gateway.drain()
    assert loop.texts() == [NOT_PROVISIONED]
    assert fake_llm.requests == []
    assert await harness.gateway.store.get_user("loop:stranger") is None


async def test_a_failing_reply_sent_observer_does_not_stop_the_conversation(
        pm: PluginManager, loop: LoopChannel,
        start_gateway: Callable[..., Awaitable[Harness]], fake_llm: FakeLLM) -> None:
    class Broken:
        @hookimpl
        def reply_sent(self, message: Delivery, text: str) -> None:
            raise RuntimeError("observer bug")

    pm.register(Broken(), name="broken-observer")
    harness = await start_gateway()
    await harness.gateway.receive(loop.message("m1", "one"))
    await harness.gateway.receive(loop.message("m2", "two"))
    await until(lambda: len(loop.sent) == 2)
    assert loop.texts() == ["echo: one", "echo: two"]


async def test_long_reply_chunks_are_delivered_once_each_despite_a_failing_chunk(
        loop: LoopChannel, harness: Harness, fake_llm: FakeLLM) -> None:
    harness.gateway.outbox.backoff_seconds = 0.01
    text = " ".join(f"w{i:03d}" for i in range(60))  # 299 characters
    fake_llm.script = [Scripted(body=completion(text))]
    loop.failures["m1"] = [None, ConnectionResetError("reset")]  # the second chunk fails once
    await harness.gateway.receive(loop.message("m1", "long please", max_chars=100))
    await harness.gateway.drain()
    chunks = loop.texts()
    assert all(len(chunk) <= 100 for chunk in chunks)
    assert " ".join(chunks) == text
    assert loop.attempts["m1"] == len(chunks) + 1 and len(fake_llm.chat_requests) == 1
