"""The ``offline`` provider: deterministic answers with no LLM account (SPEC §6)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gateway.testing.fake_llm import FakeLLM
from tests.conftest import Harness

StartGateway = Callable[..., Awaitable[Harness]]


@pytest.fixture
async def offline(start_gateway: StartGateway) -> Harness:
    """A gateway on the offline provider (the fake LLM is configured but must stay unused)."""
    return await start_gateway(llm_provider="offline")


async def reply_of(harness: Harness, auth: dict[str, str], message: str,
                   thread: str = "t1") -> dict[str, Any]:
    response = await harness.chat(auth, message, thread=thread)
    assert response.status == 200, await response.text()
    return await response.json()


async def credits_of(harness: Harness, auth: dict[str, str]) -> int:
    response = await harness.client.get("/api/user/credits", headers=auth)
    assert response.status == 200
    return (await response.json())["credits"]


async def test_offline_same_input_gives_same_reply(offline: Harness) -> None:
    auth = await offline.user()
    first = await reply_of(offline, auth, "What is the capital of France?", thread="a")
    second = await reply_of(offline, auth, "What is the capital of France?", thread="b")
    other = await reply_of(offline, auth, "Something else entirely", thread="c")
    assert first["reply"] == second["reply"]
    assert other["reply"] != first["reply"]


async def test_offline_reply_says_it_is_offline(offline: Harness) -> None:
    auth = await offline.user()
    body = await reply_of(offline, auth, "hello")
    assert "offline" in body["reply"].lower()
    assert "hello" in body["reply"]


async def test_offline_reply_reflects_pinned_memory(offline: Harness) -> None:
    auth = await offline.user()
    put = await offline.client.put("/api/user/memory", params={"threadId": "t1"},
                                   json={"key": "home_city", "value": "Lisbon"}, headers=auth)
    assert put.status == 200
    body = await reply_of(offline, auth, "where do I live?")
    assert "home_city" in body["reply"]


async def test_offline_charges_nothing(offline: Harness) -> None:
    auth = await offline.user()
    before = await credits_of(offline, auth)
    body = await reply_of(offline, auth, "hello")
    assert body["usage"]["credits"] == 0
    assert await credits_of(offline, auth) == before


async def test_offline_sends_nothing_to_the_llm(offline: Harness, fake_llm: FakeLLM) -> None:
    auth = await offline.user()
    await reply_of(offline, auth, "hello")
    await offline.gateway.drain()
    assert fake_llm.requests == []


async def test_offline_summarizes_at_ten_keeps_five(offline: Harness, fake_llm: FakeLLM) -> None:
    auth = await offline.user()
    before = await credits_of(offline, auth)
    summarized = []
    # Two messages a turn: turns 5 and 8 reach SUMMARIZE_AT (10); each keeps KEEP_RECENT (5).
    for turn in range(1, 9):
        body = await reply_of(offline, auth, f"turn {turn} about topic-{turn}")
        summarized.append(body["summarized"])
    await offline.gateway.drain()

    assert summarized == [False, False, False, False, True, False, False, True]
    response = await offline.client.get("/api/threads/t1", headers=auth)
    thread = await response.json()
    assert thread["summary"]
    assert "topic-" in thread["summary"]
    assert len(thread["messages"]) == 5
    assert thread["messages"][-1]["role"] == "assistant"
    assert "topic-8" in thread["messages"][-2]["content"]
    assert len(thread["display_messages"]) == 16
    assert await credits_of(offline, auth) == before
    assert fake_llm.requests == []


async def test_offline_reply_sees_the_summary(offline: Harness) -> None:
    auth = await offline.user()
    for turn in range(1, 6):
        await reply_of(offline, auth, f"turn {turn}")
    await offline.gateway.drain()
    body = await reply_of(offline, auth, "what do you remember?")
    assert "summary" in body["reply"]
