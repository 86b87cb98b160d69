"""The channel kit: ordering, de-duplication, delivery retries, the reply_sent hook."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from gateway import Command, hookimpl, split_text
from gateway.interfaces import DeliveryFailed, DeliveryRetry
from gateway.kit.inbound import BAD_SENDER, EMPTY_REPLY
from gateway.plugins.manager import PluginManager
from gateway.store import Delivery
from gateway.testing.fake_llm import FakeLLM, Scripted, completion
from tests.conftest import Harness
from tests.fakes.loop import LoopChannel
from tests.helpers import assert_json_error

StartGateway = Callable[..., Awaitable[Harness]]



class SentLog:
    def __init__(self) -> None:
        self.replies: list[tuple[str, str]] = []

    @hookimpl
    def reply_sent(self, message: Delivery, text: str) -> None:
        self.replies.append((message.message_id, text))


@pytest.fixture
def sent_log(pm: PluginManager) -> SentLog:
    log = SentLog()
    pm.register(log, name="sent-log")
    return log


async def test_reply_sent_observes_each_delivered_reply(
        sent_log: SentLog, loop: LoopChannel, start_gateway: StartGateway) -> None:
    harness = await start_gateway()
    await harness.gateway.receive(loop.message("m1", "hello"))
    await loop.wait_for(1)
    await harness.gateway.drain()
    assert sent_log.replies == [("m1", "echo: hello")]


async def test_messages_of_one_conversation_run_in_arrival_order(
        loop: LoopChannel, start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway()
    for i in range(5):
        await harness.gateway.receive(loop.message(f"m{i}", f"text {i}"))
    sent = await loop.wait_for(5)
    assert [text for _, text in sent] == [f"echo: text {i}" for i in range(5)]


async def test_a_redelivered_message_is_answered_once(
        loop: LoopChannel, start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway()
    taken = [await harness.gateway.receive(loop.message("same-id", "hello")) for _ in range(3)]
    await harness.gateway.drain()
    assert taken == [True, False, False]
    assert loop.replies() == [("same-id", "echo: hello")]
    assert len(fake_llm.chat_requests) == 1


async def test_delivery_is_retried_and_never_reruns_the_agent(
        loop: LoopChannel, start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway()
    harness.gateway.outbox.backoff_seconds = 0.01
    loop.failures["m1"] = [DeliveryRetry(0), ConnectionResetError("dropped")]
    await harness.gateway.receive(loop.message("m1", "hello"))
    await harness.gateway.drain()
    assert loop.replies() == [("m1", "echo: hello")]
    assert loop.attempts["m1"] == 3
    assert len(fake_llm.chat_requests) == 1
    assert await harness.gateway.store.deliveries() == []  # delivered: nothing left


async def test_a_futile_delivery_is_given_up_at_once_and_recorded(
        sent_log: SentLog, loop: LoopChannel, start_gateway: StartGateway,
        fake_llm: FakeLLM) -> None:
    harness = await start_gateway()
    loop.failures["m1"] = [DeliveryFailed("bot was blocked")]
    await harness.gateway.receive(loop.message("m1", "hello"))
    await harness.gateway.drain()
    assert loop.sent == []
    assert sent_log.replies == []
    [failed] = await harness.gateway.store.deliveries()
    assert (failed.state, failed.message_id, failed.attempts) == ("failed", "m1", 0)
    assert failed.last_error == "DeliveryFailed: bot was blocked"
    # the turn itself is stored: a later redelivery is not answered again
    assert not await harness.gateway.receive(loop.message("m1", "hello"))
    await harness.gateway.drain()
    assert len(fake_llm.chat_requests) == 1


async def test_only_known_messages_wait_for_an_existing_conversation(
        loop: LoopChannel, start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway()
    await harness.gateway.receive(loop.message("m1", "side remark", only_known=True))
    await harness.gateway.drain()
    assert loop.sent == []
    await harness.gateway.receive(loop.message("m2", "hello"))
    await harness.gateway.receive(loop.message("m3", "follow-up", only_known=True))
    await harness.gateway.drain()
    assert loop.texts() == ["echo: hello", "echo: follow-up"]
    assert await harness.gateway.store.inbox_pending() == []


async def test_notice_and_commands_never_call_the_model(
        loop: LoopChannel, start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway()
    await harness.gateway.receive(loop.message("m1", "", notice="text only, please"))
    await harness.gateway.receive(loop.message("m2", "", command=Command("remember", "pet Rex")))
    await harness.gateway.receive(loop.message("m3", "", command=Command("bogus")))
    await harness.gateway.drain()
    texts = loop.texts()
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


async def test_an_empty_model_answer_is_said_as_such_and_costs_nothing(
        loop: LoopChannel, start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway()
    fake_llm.script = [Scripted(body=completion("   "))]
    await harness.gateway.receive(loop.message("m1", "hello"))
    await harness.gateway.drain()
    assert loop.texts() == [EMPTY_REPLY]
    assert "could not reach" not in EMPTY_REPLY
    assert [row.kind for row in await harness.gateway.store.ledger("loop:ada")] == ["grant"]
    auth = await harness.user("alice")
    fake_llm.script = [Scripted(body=completion(""))]
    await assert_json_error(await harness.chat(auth, "hello"), 502, "empty_reply")


async def test_an_invalid_channel_sender_id_is_refused(
        loop: LoopChannel, start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway()
    await harness.gateway.receive(loop.message("m1", "hi", sender="loop:a--b"))
    await harness.gateway.drain()
    assert loop.texts() == [BAD_SENDER]
    assert fake_llm.requests == []
    assert await harness.gateway.store.get_user("loop:a--b") is None
