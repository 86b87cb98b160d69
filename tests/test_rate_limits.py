"""Per-user rate limits from the plan (SPEC §7, §9; issue 5): a sliding minute of turns, 429 with
``Retry-After`` and nothing stored over it, 0 = no limit; channel messages get a note."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import ClientResponse

from gateway.config.settings import Plan
from gateway.testing.fake_llm import FakeLLM
from tests.conftest import Harness
from tests.fakes.loop import LoopChannel
from tests.helpers import Clock, assert_json_error, waits_on
from tests.test_billing import assert_ledger_matches_balances, with_plans

AuthHeaders = dict[str, str]
StartClocked = Callable[..., Awaitable[Harness]]
TINY = Plan("tiny", credits=10_000, browser_minutes=0, retention_days=30, requests_per_minute=3)


@pytest.fixture
def start_clocked(start_clocked: StartClocked) -> StartClocked:
    """conftest's ``start_clocked`` with the ``tiny`` plan (3 turns a minute) added."""
    async def start(**overrides: Any) -> Harness:
        return await start_clocked(**{"plans": with_plans(TINY), **overrides})
    return start


async def chat_ok(harness: Harness, auth: AuthHeaders, message: str, thread: str = "t1") -> None:
    response = await harness.chat(auth, message, thread=thread)
    assert response.status == 200, await response.text()


def retry_after(response: ClientResponse) -> int:
    """The ``Retry-After`` header, which must be whole seconds, at least 1."""
    raw = response.headers["Retry-After"]
    assert raw.isdigit(), raw
    assert int(raw) >= 1
    return int(raw)


async def display_count(harness: Harness, auth: AuthHeaders, thread: str = "t1") -> int:
    response = await harness.client.get(f"/api/threads/{thread}?limit=500", headers=auth)
    assert response.status == 200
    return len((await response.json())["display_messages"])


async def test_fourth_turn_in_a_minute_is_429_with_retry_after_and_stores_nothing(
        start_clocked: StartClocked, clock: Clock, fake_llm: FakeLLM) -> None:
    harness = await start_clocked()
    auth = await harness.user("alice", plan="tiny")
    for i in range(3):
        await chat_ok(harness, auth, f"m{i}")
        clock.advance(5)
    ledger_before = await harness.gateway.store.ledger("alice")

    refused = await harness.chat(auth, "one too many")
    elsewhere = await harness.chat(auth, "a new thread, also too many", thread="t2")

    for response in (refused, elsewhere):
        await assert_json_error(response, 429, "rate_limited")
        assert 1 <= retry_after(response) <= 60
    assert retry_after(refused) == 45  # the first turn (15 s ago) leaves the window in 45 s
    assert len(fake_llm.requests) == 3
    assert await display_count(harness, auth) == 6
    assert (await harness.client.get("/api/threads/t2", headers=auth)).status == 404
    assert await harness.gateway.store.ledger("alice") == ledger_before
    assert [t["threadId"] for t in (await (await harness.client.get(
        "/api/threads", headers=auth)).json())["threads"]] == ["t1"]


async def test_turns_are_accepted_again_once_the_window_has_room(
        start_clocked: StartClocked, clock: Clock) -> None:
    harness = await start_clocked()
    auth = await harness.user("alice", plan="tiny")
    for i in range(3):
        await chat_ok(harness, auth, f"m{i}")
    clock.advance(30)
    await assert_json_error(await harness.chat(auth, "too soon"), 429, "rate_limited")

    clock.advance(30)  # the three turns are a minute old now
    for i in range(3):
        await chat_ok(harness, auth, f"again {i}")
    refused = await harness.chat(auth, "and one too many again")
    await assert_json_error(refused, 429, "rate_limited")
    assert retry_after(refused) == 60


async def test_waiting_the_retry_after_seconds_is_enough(
        start_clocked: StartClocked, clock: Clock) -> None:
    harness = await start_clocked()
    auth = await harness.user("alice", plan="tiny")
    for i in range(3):
        await chat_ok(harness, auth, f"m{i}")
    clock.advance(58.6)
    refused = await harness.chat(auth, "too soon")
    await assert_json_error(refused, 429, "rate_limited")

    clock.advance(retry_after(refused))

    await chat_ok(harness, auth, "waited as told")


async def test_free_plan_allows_twenty_turns_a_minute(
        start_clocked: StartClocked, clock: Clock) -> None:
    harness = await start_clocked()
    auth = await harness.user("alice", plan="free")
    assert harness.gateway.settings.plans["free"].requests_per_minute == 20
    for i in range(20):
        await chat_ok(harness, auth, f"m{i}", thread=f"t{i}")
        clock.advance(1)

    await assert_json_error(await harness.chat(auth, "21st"), 429, "rate_limited")


async def test_team_plan_has_no_limit(start_clocked: StartClocked, fake_llm: FakeLLM) -> None:
    harness = await start_clocked()
    auth = await harness.user("alice", plan="team")
    assert harness.gateway.settings.plans["team"].requests_per_minute == 0

    for i in range(30):  # the clock never moves: all within one instant
        await chat_ok(harness, auth, f"m{i}", thread=f"t{i}")

    assert len(fake_llm.requests) == 30


async def test_concurrent_turns_over_the_limit_are_refused(
        start_clocked: StartClocked, fake_llm: FakeLLM) -> None:
    harness = await start_clocked()
    auth = await harness.user("alice", plan="tiny")

    responses = await asyncio.wait_for(asyncio.gather(
        *(harness.chat(auth, f"m{i}", thread=f"t{i}") for i in range(8))), 30)

    statuses = sorted(response.status for response in responses)
    assert statuses == [200] * 3 + [429] * 5
    assert len(fake_llm.requests) == 3
    await assert_ledger_matches_balances(harness.gateway, "alice")


async def test_limits_are_per_user(start_clocked: StartClocked) -> None:
    harness = await start_clocked()
    alice = await harness.user("alice", plan="tiny")
    bob = await harness.user("bob", plan="tiny")
    for i in range(3):
        await chat_ok(harness, alice, f"m{i}")
    await assert_json_error(await harness.chat(alice, "too many"), 429, "rate_limited")

    for i in range(3):
        await chat_ok(harness, bob, f"m{i}")
    await assert_json_error(await harness.chat(bob, "too many"), 429, "rate_limited")


async def test_other_calls_do_not_count_against_the_limit(start_clocked: StartClocked) -> None:
    harness = await start_clocked()
    auth = await harness.user("alice", plan="tiny")
    for _ in range(5):
        assert (await harness.client.get("/api/user/credits", headers=auth)).status == 200
        assert (await harness.client.get("/api/threads", headers=auth)).status == 200

    for i in range(3):
        await chat_ok(harness, auth, f"m{i}")


async def test_channel_message_over_the_limit_waits_for_room_then_is_answered(
        loop: LoopChannel, start_clocked: StartClocked, fake_llm: FakeLLM,
        clock: Clock) -> None:
    harness = await start_clocked(default_plan="tiny")  # channel senders join on "tiny"
    waited, harness.gateway.inbox.wait_for_rate = waits_on(clock)
    for number in range(4):
        await harness.gateway.receive(loop.message(f"m{number}", f"hello {number}"))
    await loop.wait_for(4, timeout=10)
    await harness.gateway.drain()

    # the fourth is never dropped: it waits until the minute has room, in order
    assert loop.texts() == ["echo: hello 0", "echo: hello 1", "echo: hello 2", "echo: hello 3"]
    assert waited == [60.0]  # all four came within one instant of the clock
    assert len(fake_llm.requests) == 4
    page = await harness.gateway.store.display_page("loop:c1", 100, None)
    assert [m.content for m in page.messages if m.role == "user"] == [
        "hello 0", "hello 1", "hello 2", "hello 3"]


async def test_channel_message_still_over_the_limit_after_waiting_gets_a_note(
        loop: LoopChannel, start_clocked: StartClocked, fake_llm: FakeLLM) -> None:
    harness = await start_clocked(default_plan="tiny")

    async def time_stands_still(seconds: float) -> None:
        return None

    harness.gateway.inbox.wait_for_rate = time_stands_still
    for number in range(4):
        await harness.gateway.receive(loop.message(f"m{number}", f"hello {number}"))
    await harness.gateway.drain()
    replies = loop.texts()
    assert replies[:3] == ["echo: hello 0", "echo: hello 1", "echo: hello 2"]
    assert "sending messages faster than your plan allows" in replies[3]
    assert "wait 60 s" in replies[3]
    assert len(fake_llm.requests) == 3
    user = await harness.gateway.store.get_user("loop:ada")
    assert user is not None and user.plan == "tiny"
