"""Billing (SPEC §9, issue 5): what each LLM call costs, the ledger behind both balances,
refusal before cost, reservations for concurrent turns, monthly grants and plan changes."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Awaitable, Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from gateway import Gateway
from gateway.base.tokens import load_encoding
from gateway.billing.credits import CallUsage, charge_for, period_of
from gateway.config.settings import DEFAULT_PLANS, Plan, Price, Settings
from gateway.store import Charge
from gateway.store.migrations import MIGRATIONS
from gateway.store.sqlite import SQLiteStore
from gateway.testing.fake_llm import FakeLLM, Recorded, Scripted, completion, tool_call_completion
from tests.conftest import Harness
from tests.helpers import Clock, assert_json_error, month_start

StartGateway = Callable[..., Awaitable[Harness]]

AuthHeaders = dict[str, str]
StartClocked = Callable[..., Awaitable[Harness]]
CALCULATOR_CALL = ("call_1", "calculator", '{"expression": "2+3"}')


# --- shared by the billing test modules ---------------------------------------------------------
async def assert_ledger_matches_balances(gateway: Gateway, user_id: str) -> list[Charge]:
    """users.credits == -sum(ledger.credits) and the same for browser minutes; the ledger."""
    user = await gateway.store.get_user(user_id)
    assert user is not None
    ledger = await gateway.store.ledger(user_id)
    assert user.credits == -sum(row.credits for row in ledger)
    assert user.browser_minutes == -sum(row.minutes for row in ledger)
    return ledger


async def credits_body(harness: Harness, auth: AuthHeaders) -> dict[str, Any]:
    response = await harness.client.get("/api/user/credits", headers=auth)
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


def with_plans(*plans: Plan) -> dict[str, Plan]:
    """The built-in plans plus ``plans``."""
    return {**DEFAULT_PLANS, **{plan.name: plan for plan in plans}}


# --- fixtures ----------------------------------------------------------------------------------
async def kinds(gateway: Gateway, user_id: str = "alice") -> list[str]:
    return [row.kind for row in await gateway.store.ledger(user_id)]


# --- charge arithmetic -------------------------------------------------------------------------
@pytest.mark.parametrize(("model", "prompt", "completion_", "credits"), [
    ("fake-model", 0, 0, 0),
    ("fake-model", 1, 0, 1),  # any use costs at least one whole credit
    ("fake-model", 1000, 0, 1),  # exactly one credit, not rounded up to two
    ("fake-model", 1234, 567, 3),  # 1.234 + 1.701 = 2.935
    ("priced", 1234, 567, 9),  # 3.085 + 5.67 = 8.755
    ("priced", 2000, 1000, 15),  # 5 + 10, exactly
    ("float-noise", 50_000, 0, 55),  # 50,000 * 1.1 / 1000 is 55.00000000000001 in floats
])
def test_a_call_costs_whole_credits_rounded_up_at_the_models_price(
        make_settings: Callable[..., Settings], model: str, prompt: int, completion_: int,
        credits: int) -> None:
    settings = make_settings(llm_model=model, prices={
        "default": Price(1.0, 3.0), "priced": Price(2.5, 10.0), "float-noise": Price(1.1, 0.0)})
    assert charge_for(settings, "chat", CallUsage(model, model, prompt, completion_)) == Charge(
        "chat", model, prompt, completion_, credits)


async def test_chat_turn_is_one_ledger_row_charged_from_the_reported_usage(
        start_gateway: StartClocked, fake_llm: FakeLLM) -> None:
    harness = await start_gateway(
        prices={"default": Price(1.0, 3.0), "fake-model": Price(2.5, 10.0)})
    auth = await harness.user("alice", credits=500)
    fake_llm.script.append(Scripted(body=completion("hi", prompt_tokens=1234,
                                                    completion_tokens=567)))

    response = await harness.chat(auth, "hello")

    assert response.status == 200
    assert (await response.json())["usage"] == {"promptTokens": 1234, "completionTokens": 567,
                                                "credits": 9}
    ledger = await assert_ledger_matches_balances(harness.gateway, "alice")
    assert ledger[1:] == [Charge("chat", "fake-model", 1234, 567, 9)]
    assert (await credits_body(harness, auth))["credits"] == 500 - 9


async def test_summarization_is_its_own_row_charged_from_its_usage(
        start_gateway: StartClocked, fake_llm: FakeLLM) -> None:
    harness = await start_gateway()
    auth = await harness.user("alice", credits=500)

    def answer(request: Recorded) -> Scripted:
        if request.is_summary:
            return Scripted(body=completion("SUMMARY: five turns", prompt_tokens=1500,
                                            completion_tokens=300))
        return Scripted(body=completion("ok", prompt_tokens=100, completion_tokens=10))
    fake_llm.responder = answer

    bodies = []
    for i in range(5):
        response = await harness.chat(auth, f"m{i}")
        assert response.status == 200
        bodies.append(await response.json())
    await harness.gateway.drain()

    # chat: (100 * 1 + 10 * 3) / 1000 → 1 credit; summary: (1500 + 900) / 1000 → 3 credits
    assert [b["usage"]["credits"] for b in bodies] == [1, 1, 1, 1, 1]
    assert bodies[-1]["summarized"] is True
    ledger = await assert_ledger_matches_balances(harness.gateway, "alice")
    assert [row.kind for row in ledger] == ["grant", *["chat"] * 5, "summarize"]
    assert ledger[-1] == Charge("summarize", "fake-model", 1500, 300, 3)
    assert (await credits_body(harness, auth))["credits"] == 500 - 5 - 3


def tiktoken_prompt_tokens(request: Recorded) -> int:
    """The cookbook count of a chat request: 3 per message + role + content, 3 to prime the
    reply, plus the tool schemas sent with it (counted as their JSON text)."""
    encoding = load_encoding("cl100k_base")
    count = 3 + sum(3 + len(encoding.encode_ordinary(m["role"]))
                    + len(encoding.encode_ordinary(m["content"] or ""))
                    for m in request.messages)
    if request.body.get("tools"):
        count += len(encoding.encode_ordinary(json.dumps(request.body["tools"])))
    return count


async def test_chat_without_reported_usage_is_charged_from_tiktoken_counts(
        start_gateway: StartClocked, fake_llm: FakeLLM) -> None:
    harness = await start_gateway(prices={"default": Price(100.0, 1000.0)})
    auth = await harness.user("alice", credits=5000)
    reply = "A reply whose tokens the gateway has to count by itself."
    fake_llm.script.append(Scripted(body=completion(reply, prompt_tokens=None)))
    assert "usage" not in fake_llm.script[0].body

    response = await harness.chat(auth, "count my tokens, please")

    assert response.status == 200
    prompt = tiktoken_prompt_tokens(fake_llm.requests[-1])
    done = len(load_encoding("cl100k_base").encode_ordinary(reply))
    credits = -(-(prompt * 100 + done * 1000) // 1000)
    assert (await response.json())["usage"] == {"promptTokens": prompt,
                                                "completionTokens": done, "credits": credits}
    ledger = await assert_ledger_matches_balances(harness.gateway, "alice")
    assert ledger[-1] == Charge("chat", "fake-model", prompt, done, credits)


async def test_summarization_without_reported_usage_is_charged_from_tiktoken_counts(
        start_gateway: StartClocked, fake_llm: FakeLLM) -> None:
    harness = await start_gateway(prices={"default": Price(100.0, 1000.0)})
    auth = await harness.user("alice", credits=50_000)
    summary = "SUMMARY: the user counted to four."

    def answer(request: Recorded) -> Scripted:
        if request.is_summary:
            return Scripted(body=completion(summary, prompt_tokens=None))
        return Scripted(body=completion("ok", prompt_tokens=10, completion_tokens=1))
    fake_llm.responder = answer
    for i in range(5):
        assert (await harness.chat(auth, f"m{i}")).status == 200
    await harness.gateway.drain()

    assert len(fake_llm.summary_requests) == 1
    prompt = tiktoken_prompt_tokens(fake_llm.summary_requests[0])
    done = len(load_encoding("cl100k_base").encode_ordinary(summary))
    ledger = await assert_ledger_matches_balances(harness.gateway, "alice")
    assert ledger[-1] == Charge("summarize", "fake-model", prompt, done,
                                -(-(prompt * 100 + done * 1000) // 1000))


# SPEC §11: the price is the configured model's, whatever model the provider says it ran; so is
# the ledger row's name (the provider's word is outside text: only logged, masked).
@pytest.mark.parametrize(("configured", "reported", "credits"), [
    ("fake-model", "fake-model", 10),  # the model's own price
    ("fake-model", "fake-model-2026-01-01", 10),  # an unpriced snapshot
    ("fake-model", "premium", 10),  # a pricier model named: still the configured price
    ("fake-model", "offline", 10),  # a free model named: still the configured price
    ("unpriced", "unpriced-2026-01-01", 1),  # the configured model has no price: the default
])
async def test_price_is_the_configured_models_then_default_whatever_model_is_reported(
        start_gateway: StartClocked, fake_llm: FakeLLM, configured: str, reported: str,
        credits: int) -> None:
    harness = await start_gateway(llm_model=configured, prices={
        "default": Price(1.0, 3.0), "fake-model": Price(10.0, 0.0), "premium": Price(50.0, 0.0)})
    auth = await harness.user("alice", credits=500)
    fake_llm.script.append(Scripted(body=completion("hi", 1000, 0, model=reported)))

    response = await harness.chat(auth, "hello")

    assert response.status == 200
    assert (await response.json())["usage"]["credits"] == credits
    ledger = await assert_ledger_matches_balances(harness.gateway, "alice")
    assert ledger[-1] == Charge("chat", configured, 1000, 0, credits)


# --- the ledger behind both balances -----------------------------------------------------------
async def test_after_a_mixed_run_the_ledger_sums_to_both_balances(
        start_clocked: StartClocked, fake_llm: FakeLLM, clock: Clock) -> None:
    harness = await start_clocked()
    gateway = harness.gateway
    auth = await harness.user("alice")  # free: 1000 credits, 30 browser minutes
    await assert_ledger_matches_balances(gateway, "alice")

    for i in range(5):  # the fifth turn triggers a summarization
        assert (await harness.chat(auth, f"m{i}")).status == 200
    await gateway.drain()
    fake_llm.script += [Scripted(body=tool_call_completion([CALCULATOR_CALL], None, 300, 20)),
                        Scripted(body=completion("5", 400, 7))]
    assert (await harness.chat(auth, "what is 2+3?", thread="tools")).status == 200
    await gateway.store.grant_credits("alice", 250)
    await gateway.store.charge_minutes("alice", "alice--t1", 7)
    await gateway.store.charge_minutes("alice", None, 5)
    await assert_ledger_matches_balances(gateway, "alice")
    await gateway.store.set_plan("alice", "pro", 20_000, 600)
    assert (await harness.chat(auth, "on pro now")).status == 200
    await gateway.store.charge_minutes("alice", "alice--t1", 600)  # all of them, and more
    clock.next_month()
    body = await credits_body(harness, auth)  # applies the monthly grant
    assert (await harness.chat(auth, "a new month")).status == 200
    await gateway.drain()

    ledger = await assert_ledger_matches_balances(gateway, "alice")
    assert {row.kind for row in ledger} == {"grant", "chat", "tool_round", "summarize",
                                            "browser", "plan_grant", "monthly_grant"}
    assert body["credits"] == 20_000 and body["browserMinutes"] == 600
    after = await credits_body(harness, auth)
    assert after["credits"] == -sum(row.credits for row in ledger)
    assert after["browserMinutes"] == -sum(row.minutes for row in ledger)


async def test_browser_minutes_have_their_own_balance_and_ledger_rows(
        start_gateway: StartClocked) -> None:
    harness = await start_gateway()
    auth = await harness.user("alice", credits=100)

    user = await harness.gateway.store.charge_minutes("alice", "alice--t1", 12)

    assert (user.credits, user.browser_minutes) == (100, 30 - 12)
    ledger = await assert_ledger_matches_balances(harness.gateway, "alice")
    assert ledger[-1] == Charge("browser", "", 0, 0, 0, 12)
    body = await credits_body(harness, auth)
    assert (body["credits"], body["browserMinutes"]) == (100, 18)


async def test_an_account_from_before_billing_keeps_its_minutes_in_the_ledger(
        tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        for script in MIGRATIONS[:2]:  # the schema this gateway had before billing
            for statement in script.split(";"):
                if statement.strip():
                    conn.execute(statement)
        conn.execute("PRAGMA user_version = 2")
        # What ensure_user wrote then: minutes on the account, credits as a grant row.
        conn.execute("INSERT INTO users VALUES ('alice', 'free', 1000, 30,"
                     " '2026-10-05T10:00:00.000000Z')")
        conn.execute("INSERT INTO ledger (user_id, thread_key, kind, model, prompt_tokens,"
                     " completion_tokens, credits, created_at) VALUES ('alice', NULL, 'grant',"
                     " '', 0, 0, -1000, '2026-10-05T10:00:00.000000Z')")
    store = SQLiteStore(path)
    await store.open()
    try:
        user = await store.get_user("alice")
        ledger = await store.ledger("alice")
    finally:
        await store.close()

    assert user is not None and (user.credits, user.browser_minutes) == (1000, 30)
    assert user.credits == -sum(row.credits for row in ledger)
    assert user.browser_minutes == -sum(row.minutes for row in ledger)


# --- refusal before cost -----------------------------------------------------------------------
async def test_no_credits_is_402_before_any_provider_call_and_nothing_is_stored(
        harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user("alice", credits=0)

    response = await harness.chat(auth, "hello?")

    message = (await assert_json_error(response, 402, "out_of_credits"))["message"]
    assert "credits" in message
    assert fake_llm.requests == []
    assert (await harness.client.get("/api/threads/t1", headers=auth)).status == 404
    threads = await harness.client.get("/api/threads", headers=auth)
    assert (await threads.json())["threads"] == []
    page = await harness.gateway.store.display_page("alice--t1", 100, None)
    assert page.messages == []
    assert not (harness.gateway.settings.sessions_dir / "alice--t1.jsonl").exists()
    assert [row.credits for row in await harness.gateway.store.ledger("alice")] == [0]
    assert (await credits_body(harness, auth))["credits"] == 0


async def test_a_balance_below_zero_is_refused_too(harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user("alice", credits=1)
    fake_llm.script.append(Scripted(body=completion("costly", 1200, 1000)))  # 1.2 + 3 credits
    assert (await harness.chat(auth, "one")).status == 200  # allowed: it had a credit
    assert (await credits_body(harness, auth))["credits"] == 1 - 5

    await assert_json_error(await harness.chat(auth, "two"), 402, "out_of_credits")
    assert len(fake_llm.requests) == 1


# --- concurrent turns --------------------------------------------------------------------------
TURN_COST = 20  # completion_tokens 100 at 200 credits / 1,000 (prompt tokens are free)
RESERVATION = 33  # the most a call can be billed (SPEC §11): 100 + 64 completion tokens
METERED = Plan("metered", credits=100, browser_minutes=0, retention_days=30,
               requests_per_minute=0)


def metered_settings() -> dict[str, Any]:
    """A plan with credits for exactly five turns; every provider call costs TURN_COST, and
    reserves RESERVATION while in flight."""
    return {"plans": with_plans(METERED), "prices": {"default": Price(0.0, 200.0)},
            "llm_max_tokens": 100}


async def concurrent_chats(harness: Harness, auth: AuthHeaders,
                           threads: list[str]) -> list[tuple[int, dict[str, Any]]]:
    async def one(thread: str) -> tuple[int, dict[str, Any]]:
        response = await harness.chat(auth, f"hello from {thread}", thread=thread)
        return response.status, await response.json()
    return await asyncio.wait_for(asyncio.gather(*(one(t) for t in threads)), 60)


async def test_twenty_concurrent_turns_on_distinct_threads_overspend_by_one_turn_at_most(
        start_gateway: StartClocked, fake_llm: FakeLLM) -> None:
    harness = await start_gateway(**metered_settings())
    auth = await harness.user("alice", plan="metered")
    fake_llm.responder = lambda request: Scripted(
        body=completion("ok", prompt_tokens=57, completion_tokens=100), delay=0.05)

    results = await concurrent_chats(harness, auth, [f"t{i}" for i in range(20)])

    statuses = [status for status, _ in results]
    answered = statuses.count(200)
    refusals = {(status, body["error"]["code"]) for status, body in results if status != 200}
    # Refused while the turns in flight hold the rest of the credits: "busy, retry" (429);
    # refused once they are spent: 402.
    assert refusals <= {(429, "credits_busy"), (402, "out_of_credits")}
    # Four reservations fit at once (100 - 3 * 33 > 0); a turn arriving after those settled
    # may be a fifth, and only then are the credits spent.
    assert 4 <= answered <= 5
    assert statuses.count(429) >= 1
    assert statuses.count(402) == 0 or answered == 5
    assert len(fake_llm.requests) == answered  # refused turns never reached the provider
    balance = (await credits_body(harness, auth))["credits"]
    assert balance >= -TURN_COST
    assert balance == 100 - TURN_COST * answered
    await assert_ledger_matches_balances(harness.gateway, "alice")
    threads = (await (await harness.client.get("/api/threads", headers=auth)).json())["threads"]
    assert len(threads) == answered


async def test_twenty_concurrent_turns_on_one_thread_stop_when_the_credits_do(
        start_gateway: StartClocked, fake_llm: FakeLLM) -> None:
    harness = await start_gateway(**metered_settings())
    auth = await harness.user("alice", plan="metered")
    fake_llm.responder = lambda request: Scripted(
        body=completion("ok", prompt_tokens=57, completion_tokens=100))

    results = await concurrent_chats(harness, auth, ["t1"] * 20)
    await harness.gateway.drain()

    statuses = [status for status, _ in results]
    assert statuses.count(200) == 5 and statuses.count(402) == 15
    assert len(fake_llm.chat_requests) == 5
    assert fake_llm.summary_requests == []  # due after turn five, postponed: no credits left
    assert (await credits_body(harness, auth))["credits"] == 0
    ledger = await assert_ledger_matches_balances(harness.gateway, "alice")
    assert [row.kind for row in ledger] == ["grant", *["chat"] * 5]
    thread = await harness.client.get("/api/threads/t1?limit=100", headers=auth)
    assert len((await thread.json())["display_messages"]) == 10


async def test_concurrent_turns_with_tool_rounds_overspend_by_one_turn_at_most(
        start_gateway: StartClocked, fake_llm: FakeLLM) -> None:
    harness = await start_gateway(**metered_settings())
    auth = await harness.user("alice", plan="metered")

    def answer(request: Recorded) -> Scripted:  # every turn: one tool round, then the answer
        if request.messages[-1]["role"] == "tool":
            return Scripted(body=completion("5", prompt_tokens=80, completion_tokens=100))
        return Scripted(body=tool_call_completion([CALCULATOR_CALL], None, 60, 100), delay=0.05)
    fake_llm.responder = answer

    results = await concurrent_chats(harness, auth, [f"t{i}" for i in range(20)])

    assert [status for status, _ in results].count(200) >= 1
    await assert_ledger_matches_balances(harness.gateway, "alice")
    turn_cost = 2 * TURN_COST  # a chat call and a tool round
    assert (await credits_body(harness, auth))["credits"] >= -turn_cost


async def test_concurrent_turns_on_a_pricier_reported_model_overspend_by_one_turn_at_most(
        start_gateway: StartClocked, fake_llm: FakeLLM) -> None:
    settings = metered_settings()
    settings["prices"] = {**settings["prices"], "fake-model-large": Price(0.0, 400.0)}
    harness = await start_gateway(**settings)
    auth = await harness.user("alice", plan="metered")
    fake_llm.responder = lambda request: Scripted(
        body=completion("ok", 57, 100, model="fake-model-large"), delay=0.05)

    results = await concurrent_chats(harness, auth, [f"t{i}" for i in range(20)])

    assert [status for status, _ in results].count(200) >= 1
    ledger = await assert_ledger_matches_balances(harness.gateway, "alice")
    # SPEC §11: the configured model's price, not the pricier one the provider names.
    assert {(row.model, row.credits) for row in ledger if row.kind == "chat"} == {
        (harness.gateway.settings.llm_model, TURN_COST)}
    assert (await credits_body(harness, auth))["credits"] >= -RESERVATION


# --- monthly grants ----------------------------------------------------------------------------
async def test_monthly_grant_tops_up_to_the_plan_once_per_period(
        start_clocked: StartClocked, clock: Clock) -> None:
    harness = await start_clocked()
    gateway = harness.gateway
    auth = await harness.user("alice", credits=300)  # free: 1000 credits, 30 minutes a month
    await gateway.store.charge_minutes("alice", None, 10)
    body = await credits_body(harness, auth)
    assert (body["period"], body["credits"]) == (period_of(clock()), 300)  # same month
    assert "monthly_grant" not in await kinds(gateway)

    second = clock.next_month()
    body = await credits_body(harness, auth)
    assert (body["period"], body["credits"], body["browserMinutes"]) == (second, 1000, 30)
    assert (await credits_body(harness, auth))["credits"] == 1000
    assert (await harness.chat(auth, "hi")).status == 200
    ledger = await assert_ledger_matches_balances(gateway, "alice")
    grants = [row for row in ledger if row.kind == "monthly_grant"]
    assert grants == [Charge("monthly_grant", "", 0, 0, -700, -10)]

    clock.advance(20 * 24 * 3600)  # later in the same month: still one grant
    await credits_body(harness, auth)
    assert (await kinds(gateway)).count("monthly_grant") == 1

    third = clock.next_month()
    body = await credits_body(harness, auth)
    assert (body["period"], body["credits"]) == (third, 1000)
    assert (await kinds(gateway)).count("monthly_grant") == 2
    await assert_ledger_matches_balances(gateway, "alice")


async def test_monthly_grant_never_lowers_a_balance_above_the_plan(
        start_clocked: StartClocked, clock: Clock) -> None:
    harness = await start_clocked()
    auth = await harness.user("alice", credits=5000)  # free grants 1000
    await harness.gateway.store.charge_minutes("alice", None, 4)

    period = clock.next_month()
    body = await credits_body(harness, auth)

    assert (body["period"], body["credits"], body["browserMinutes"]) == (period, 5000, 30)
    ledger = await assert_ledger_matches_balances(harness.gateway, "alice")
    assert [row for row in ledger if row.kind == "monthly_grant"] == [
        Charge("monthly_grant", "", 0, 0, 0, -4)]  # only the minutes were below the plan


async def test_monthly_grant_happens_on_the_next_turn_without_a_credits_read(
        start_clocked: StartClocked, clock: Clock, fake_llm: FakeLLM) -> None:
    harness = await start_clocked()
    auth = await harness.user("alice", credits=0)
    await assert_json_error(await harness.chat(auth, "hi"), 402, "out_of_credits")

    clock.next_month()
    response = await harness.chat(auth, "hi again")

    assert response.status == 200
    spent = (await response.json())["usage"]["credits"]
    assert (await credits_body(harness, auth))["credits"] == 1000 - spent
    assert (await kinds(harness.gateway)).count("monthly_grant") == 1


async def test_monthly_grant_is_applied_once_across_a_restart(
        start_clocked: StartClocked, clock: Clock) -> None:
    first = await start_clocked()
    auth = await first.user("alice", credits=100)
    clock.next_month()
    assert (await credits_body(first, auth))["credits"] == 1000
    response = await first.chat(auth, "spend a little")
    spent = (await response.json())["usage"]["credits"]
    assert spent > 0
    await first.client.close()  # stops the gateway

    second = await start_clocked()
    assert (await credits_body(second, auth))["credits"] == 1000 - spent

    assert (await kinds(second.gateway)).count("monthly_grant") == 1
    await assert_ledger_matches_balances(second.gateway, "alice")


async def test_concurrent_requests_at_the_turn_of_the_month_grant_once(
        start_clocked: StartClocked, clock: Clock) -> None:
    one = await start_clocked()
    other = await start_clocked()  # a second process on the same database
    auth = await one.user("alice", credits=10)
    clock.to(month_start(clock(), months=1))  # midnight, the first second of the month

    async def turn(harness: Harness, thread: str) -> int:
        response = await harness.chat(auth, "hello", thread=thread)
        assert response.status == 200, await response.text()
        return int((await response.json())["usage"]["credits"])

    async def read(harness: Harness) -> int:
        body = await credits_body(harness, auth)
        assert body["period"] == period_of(clock())
        return int(body["credits"])

    results = await asyncio.wait_for(asyncio.gather(
        *(read(harness) for harness in [one, other] * 5),
        *(turn(harness, f"t{i}") for i, harness in enumerate([one, other] * 2))), 30)

    reads, spent = results[:10], sum(results[10:])
    assert all(1000 - spent <= balance <= 1000 for balance in reads)
    assert (await kinds(one.gateway)).count("monthly_grant") == 1
    assert (await credits_body(one, auth))["credits"] == 1000 - spent
    await assert_ledger_matches_balances(one.gateway, "alice")


async def test_a_request_that_read_the_account_before_the_rollover_grants_nothing_more(
        start_clocked: StartClocked, clock: Clock) -> None:
    one = await start_clocked()
    other = await start_clocked()  # a second process on the same database
    auth = await one.user("alice", credits=10)
    stale = await one.gateway.store.get_user("alice")  # read just before midnight...
    assert stale is not None
    clock.to(month_start(clock(), months=1))
    assert (await credits_body(one, auth))["credits"] == 1000  # ...another request rolled over
    response = await one.chat(auth, "spend a little")
    spent = (await response.json())["usage"]["credits"]

    for harness in (one, other):  # ...and now the first request gets to it
        assert (await harness.gateway.accounts.current_user(stale)).credits == 1000 - spent

    assert (await kinds(one.gateway)).count("monthly_grant") == 1
    await assert_ledger_matches_balances(one.gateway, "alice")


async def test_account_added_with_zero_credits_has_nothing_until_the_next_period(
        start_clocked: StartClocked, clock: Clock) -> None:
    harness = await start_clocked()
    auth = await harness.user("alice", plan="pro", credits=0)
    body = await credits_body(harness, auth)
    assert (body["credits"], body["browserMinutes"]) == (0, 600)
    await assert_json_error(await harness.chat(auth, "hi"), 402, "out_of_credits")

    clock.advance(3600)  # same period: still nothing
    assert (await credits_body(harness, auth))["credits"] == 0

    clock.next_month()
    assert (await credits_body(harness, auth))["credits"] == 20_000
    assert (await harness.chat(auth, "hi")).status == 200


async def test_plan_change_tops_up_at_once_and_never_takes_away(
        start_gateway: StartClocked) -> None:
    harness = await start_gateway()
    gateway = harness.gateway
    auth = await harness.user("alice", credits=100)
    await gateway.store.charge_minutes("alice", None, 20)

    moved = await gateway.store.set_plan("alice", "pro", 20_000, 600)
    assert (moved.plan, moved.credits, moved.browser_minutes) == ("pro", 20_000, 600)
    body = await credits_body(harness, auth)
    assert (body["plan"], body["credits"], body["browserMinutes"]) == ("pro", 20_000, 600)

    back = await gateway.store.set_plan("alice", "free", 1000, 30)
    assert (back.plan, back.credits, back.browser_minutes) == ("free", 20_000, 600)
    ledger = await assert_ledger_matches_balances(gateway, "alice")
    assert [row for row in ledger if row.kind == "plan_grant"] == [
        Charge("plan_grant", "", 0, 0, -19_900, -590)]


async def test_a_call_that_answered_is_billed_when_a_later_round_fails(
        start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway(llm_max_retries=0)
    auth = await harness.user(credits=1000)
    fake_llm.script = [
        Scripted(body=tool_call_completion([("c1", "calculator", '{"expression": "1+1"}')],
                                           None, 1500, 500)),
        Scripted(status=500, body={"error": {"message": "down"}})]
    response = await harness.chat(auth, "what is 1+1?")
    assert response.status == 502
    ledger = await harness.gateway.store.ledger("alice")
    assert [(row.kind, row.prompt_tokens) for row in ledger] == [("grant", 0), ("chat", 1500)]
    credits = await (await harness.client.get("/api/user/credits", headers=auth)).json()
    assert credits["credits"] == 1000 - ledger[-1].credits


async def test_tool_rounds_do_not_stack_their_own_worst_cases(
        start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    # Each call's worst case is ~100 credits (1,000 max tokens at 100/1,000); each call really
    # costs 1. Three calls must fit in 250 credits: the turn's earlier estimates are replaced by
    # what it really spent, not added up.
    harness = await start_gateway(prices={"default": Price(0.0, 100.0)},
                                  llm_max_tokens=1000)
    auth = await harness.user(credits=250)
    call = tool_call_completion([("c1", "calculator", '{"expression": "2*3"}')], None, 10, 10)
    fake_llm.script = [Scripted(body=call), Scripted(body=call),
                       Scripted(body=completion("six", 10, 10))]
    response = await harness.chat(auth, "2*3 twice?")
    assert response.status == 200
    assert (await response.json())["reply"] == "six"
