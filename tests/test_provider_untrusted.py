"""Provider answers are untrusted input (SPEC §11), tried against the fake OpenAI server.

Reported usage is believed only as non-negative integers within bounds (prompt tokens at most
4 x our count + 1,000, completion tokens at most max_tokens + 64); otherwise our own tiktoken
count is billed and a warning logged. The price is the configured model's. Malformed answers
and tool calls are tool errors the model reads or a 502, never a 500. Credits never go further
below zero than one call's cost, and a turn refused only because other turns hold the credits
is told to retry (429 ``credits_busy``), not that the credits are gone (402).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.base.errors import PaymentRequired
from gateway.base.tokens import load_encoding
from gateway.billing.credits import CreditGuard, CreditsBusy
from gateway.config.settings import Price
from gateway.testing.fake_llm import FakeLLM, Recorded, Scripted, completion
from gateway.tools import nests_deeper_than
from tests.conftest import Harness
from tests.helpers import assert_json_error, until
from tests.test_billing import (
    assert_ledger_matches_balances,
    credits_body,
    tiktoken_prompt_tokens,
)
from tests.test_provider_openai import snapshot

StartGateway = Callable[..., Awaitable[Harness]]

AuthHeaders = dict[str, str]
MAX_TOKENS = 1024  # the configured default
DEFAULT_PRICE = Price(1.0, 3.0)  # what "fake-model" (not in the price table) costs
DEEP = 100_000


def tokens(text: str) -> int:
    return len(load_encoding("cl100k_base").encode_ordinary(text))


def credits_of(prompt: int, done: int, price: Price = DEFAULT_PRICE) -> int:
    return math.ceil((prompt * price.prompt + done * price.completion) / 1000 - 1e-9)


def prompt_bound(request: Recorded) -> int:
    """The most prompt tokens the gateway believes of a call: 4 x its count + 1,000."""
    return 4 * tiktoken_prompt_tokens(request) + 1000


def max_call_cost(request: Recorded, price: Price = DEFAULT_PRICE,
                  max_tokens: int = MAX_TOKENS) -> int:
    """The most one call can be billed: both bounds at the configured price."""
    return credits_of(prompt_bound(request), max_tokens + 64, price)


def with_usage(text: str, usage: Any, model: Any = "fake-model") -> dict[str, Any]:
    """A chat.completion whose ``usage`` and ``model`` are whatever the test says."""
    body = completion(text, prompt_tokens=None, model="fake-model")
    body["usage"] = usage
    body["model"] = model
    return body


def tool_calls_body(calls: list[Any]) -> dict[str, Any]:
    """A chat.completion asking for ``calls``, each entry exactly as given."""
    body = completion("", 10, 5)
    body["choices"][0]["finish_reason"] = "tool_calls"
    body["choices"][0]["message"] = {"role": "assistant", "content": None, "tool_calls": calls}
    return body


def call(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": arguments}}


def deep_array(depth: int) -> str:
    return "[" * depth + "]" * depth


async def only_chat_row(harness: Harness) -> Any:
    ledger = await assert_ledger_matches_balances(harness.gateway, "alice")
    assert [row.kind for row in ledger] == ["grant", "chat"]
    return ledger[-1]


# --- reported usage --------------------------------------------------------------------------
@pytest.mark.parametrize(("prompt", "done"), [
    pytest.param(-1_000_000, -1_000_000, id="negative"),
    pytest.param(10**20, 10**20, id="ten-to-the-twenty"),
    pytest.param(10**4000, 2**63, id="four-thousand-digits"),
    pytest.param("1000", True, id="string-and-bool"),
    pytest.param(12.0, False, id="float-and-bool"),
    pytest.param(True, [5], id="bool-and-list"),
])
async def test_usage_that_is_not_a_count_is_billed_from_our_own_count(
        start_gateway: StartGateway, fake_llm: FakeLLM, prompt: Any, done: Any) -> None:
    harness = await start_gateway()
    auth = await harness.user("alice", credits=1000)
    reply = "Here is an answer of a few tokens."
    fake_llm.script.append(Scripted(body=with_usage(reply, {
        "prompt_tokens": prompt, "completion_tokens": done, "total_tokens": 7})))

    response = await harness.chat(auth, "hello")

    assert response.status == 200, await response.text()
    counted = tiktoken_prompt_tokens(fake_llm.requests[-1])
    expected = credits_of(counted, tokens(reply))
    assert (await response.json())["usage"] == {
        "promptTokens": counted, "completionTokens": tokens(reply), "credits": expected}
    row = await only_chat_row(harness)
    assert (row.prompt_tokens, row.completion_tokens, row.credits) == (
        counted, tokens(reply), expected)
    assert (await credits_body(harness, auth))["credits"] == 1000 - expected


async def test_usage_above_the_bounds_is_billed_from_our_own_count_with_a_warning(
        start_gateway: StartGateway, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture,
        ) -> None:
    harness = await start_gateway()
    auth = await harness.user("alice", credits=1000)

    def at_bounds(over: int) -> Callable[[Recorded], Scripted]:
        return lambda request: Scripted(body=completion(
            "ok", prompt_bound(request) + over, MAX_TOKENS + 64 + over))

    fake_llm.responder = at_bounds(0)  # at the bounds: believed
    at = await harness.chat(auth, "first", thread="t1")
    fake_llm.responder = at_bounds(1)  # one token over each: not believed
    with caplog.at_level(logging.WARNING):
        over = await harness.chat(auth, "second", thread="t2")

    assert at.status == 200 and over.status == 200
    first, second = fake_llm.requests
    assert (await at.json())["usage"] == {
        "promptTokens": prompt_bound(first), "completionTokens": MAX_TOKENS + 64,
        "credits": max_call_cost(first)}
    counted = tiktoken_prompt_tokens(second)
    assert (await over.json())["usage"] == {
        "promptTokens": counted, "completionTokens": tokens("ok"),
        "credits": credits_of(counted, tokens("ok"))}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for reported, bound in ((prompt_bound(second) + 1, prompt_bound(second)),
                            (MAX_TOKENS + 65, MAX_TOKENS + 64)):
        assert any(f"= {reported}, not a count within 0..{bound}" in message
                   and "billing the gateway's own count" in message
                   for message in warnings), warnings
    await assert_ledger_matches_balances(harness.gateway, "alice")


async def test_an_answer_longer_than_max_tokens_is_billed_no_more_than_the_bound(
        start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway(llm_max_tokens=50)
    auth = await harness.user("alice", credits=1000)
    rambling = "word " * 5000  # 5,000 tokens although 50 were asked for, and no usage
    fake_llm.script.append(Scripted(body=completion(rambling, prompt_tokens=None)))

    response = await harness.chat(auth, "be brief")

    assert response.status == 200
    counted = tiktoken_prompt_tokens(fake_llm.requests[-1])
    assert (await response.json())["usage"] == {
        "promptTokens": counted, "completionTokens": 50 + 64,
        "credits": credits_of(counted, 50 + 64)}


@pytest.mark.parametrize("reported", ["offline", "gpt-4o-mini-2024-07-18", "cheap", 42, None])
async def test_the_configured_models_price_applies_whatever_model_is_reported(
        start_gateway: StartGateway, fake_llm: FakeLLM, reported: Any) -> None:
    mini = Price(150.0, 600.0)
    harness = await start_gateway(llm_model="gpt-4o-mini", prices={
        "default": DEFAULT_PRICE, "offline": Price(0.0, 0.0), "cheap": Price(0.001, 0.001),
        "gpt-4o-mini": mini})
    auth = await harness.user("alice", credits=10_000)
    fake_llm.script.append(Scripted(body=with_usage(
        "hi", {"prompt_tokens": 20, "completion_tokens": 10}, model=reported)))

    response = await harness.chat(auth, "hello")

    assert response.status == 200, await response.text()
    assert (await response.json())["usage"]["credits"] == credits_of(20, 10, mini) == 9
    row = await only_chat_row(harness)
    assert row.credits == 9
    # The ledger names the configured model: what the provider says it ran is outside text.
    assert row.model == "gpt-4o-mini"


async def test_summarization_usage_outside_the_bounds_is_billed_from_our_own_count(
        start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway()
    auth = await harness.user("alice", credits=100_000)
    summary = "SUMMARY: the user counted."

    def answer(request: Recorded) -> Scripted:
        if request.is_summary:
            return Scripted(body=completion(summary, 10**20, -5))
        return Scripted(body=completion("ok", 10, 1))
    fake_llm.responder = answer
    for i in range(5):
        assert (await harness.chat(auth, f"m{i}")).status == 200
    await harness.gateway.drain()

    assert len(fake_llm.summary_requests) == 1
    ledger = await assert_ledger_matches_balances(harness.gateway, "alice")
    counted = tiktoken_prompt_tokens(fake_llm.summary_requests[0])
    assert ledger[-1].kind == "summarize"
    assert (ledger[-1].prompt_tokens, ledger[-1].completion_tokens, ledger[-1].credits) == (
        counted, tokens(summary), credits_of(counted, tokens(summary)))


# --- property: whatever usage is reported, the charge is a bounded count -----------------------
JSON_SCALARS = (st.none() | st.booleans() | st.floats() | st.text(max_size=8)
                | st.integers() | st.sampled_from([-1, 0, 2**63, 10**20, 10**4000]))
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3),
    max_leaves=6)
USAGES = JSON_VALUES | st.fixed_dictionaries({}, optional={
    "prompt_tokens": JSON_VALUES | st.integers(min_value=0, max_value=5000),
    "completion_tokens": JSON_VALUES | st.integers(min_value=0, max_value=2000)})


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(usage=USAGES, model=JSON_VALUES)
async def test_any_reported_usage_is_billed_as_a_bounded_non_negative_count(
        harness: Harness, fake_llm: FakeLLM, usage: Any, model: Any) -> None:
    gateway = harness.gateway  # one gateway for all examples: each has a thread of its own
    if await gateway.store.get_user("alice") is None:
        await gateway.accounts.add_user("alice", plan="team", credits=10**9)  # team: no rate limit
    headers = {"Authorization": f"Bearer {await gateway.accounts.issue_token('alice')}"}
    thread = f"t{len(fake_llm.requests)}"
    fake_llm.script.append(Scripted(body=with_usage("fine", usage, model)))

    response = await harness.chat(headers, "hello", thread=thread)

    assert response.status == 200, await response.text()
    row = (await harness.gateway.store.ledger("alice"))[-1]
    bound = prompt_bound(fake_llm.requests[-1])
    assert type(row.prompt_tokens) is int and 0 <= row.prompt_tokens <= bound
    assert type(row.completion_tokens) is int and 0 <= row.completion_tokens <= MAX_TOKENS + 64
    assert row.credits == credits_of(row.prompt_tokens, row.completion_tokens)
    assert 0 <= row.credits <= max_call_cost(fake_llm.requests[-1])


# --- malformed answers and tool calls ----------------------------------------------------------
@pytest.mark.parametrize("raw", [
    pytest.param(deep_array(DEEP).encode(), id="deep-array"),
    pytest.param(b'{"choices": [{"message": {"role": "assistant", "content": "hi"}}], "x": '
                 + deep_array(DEEP).encode() + b"}", id="deep-inside-a-completion"),
])
async def test_an_answer_nested_100k_deep_is_502_and_nothing_is_stored_or_charged(
        harness: Harness, fake_llm: FakeLLM, raw: bytes) -> None:
    auth = await harness.user()
    before = await snapshot(harness, auth)
    fake_llm.script.append(Scripted(raw=raw))

    response = await harness.chat(auth, "hello")

    await assert_json_error(response, 502, "provider_error")
    assert await snapshot(harness, auth) == before


@pytest.mark.parametrize(("arguments", "said"), [
    pytest.param({"expression": "2+3"}, "not an object", id="object"),
    pytest.param(42, "not a number", id="int"),
    pytest.param(None, "not null", id="null"),
    pytest.param('{"a":' * 65 + "1" + "}" * 65, "nested deeper than 64", id="depth-65"),
    pytest.param(deep_array(DEEP), "nested deeper than 64", id="depth-100k"),
    pytest.param('{"expression": ' + "9" * 5000 + "}", "cannot be read", id="5000-digits"),
])
async def test_malformed_tool_arguments_are_errors_the_model_reads(
        start_gateway: StartGateway, fake_llm: FakeLLM, arguments: Any, said: str) -> None:
    # Room for the 100,000-deep arguments (as many tokens) in what is sent back.
    harness = await start_gateway(max_context=250_000)
    auth = await harness.user()
    fake_llm.script += [
        Scripted(body=tool_calls_body([call("c1", "calculator", arguments),
                                       call("c2", "no_such_tool", "{}")])),
        Scripted(body=completion("I could not use the tools."))]

    response = await harness.chat(auth, "use a tool")

    assert response.status == 200, await response.text()
    assert (await response.json())["reply"] == "I could not use the tools."
    sent_back = fake_llm.requests[1].messages
    assert [m["tool_call_id"] for m in sent_back[-2:]] == ["c1", "c2"]
    bad, unknown = (m["content"] for m in sent_back[-2:])
    assert bad.startswith("error: ") and said in bad
    assert unknown.startswith("error: ") and "no tool named" in unknown
    # The call goes back to the provider as JSON text, as OpenAI requires.
    assert all(isinstance(c["function"]["arguments"], str)
               for c in sent_back[-3]["tool_calls"])
    ledger = await assert_ledger_matches_balances(harness.gateway, "alice")
    assert [row.kind for row in ledger] == ["grant", "chat", "tool_round"]


@pytest.mark.parametrize("calls", [
    pytest.param([call(None, "calculator", "{}")], id="id-null"),
    pytest.param([call(7, "calculator", "{}")], id="id-a-number"),
    pytest.param([call("c1", 7, "{}")], id="name-a-number"),
    pytest.param([call("c1", None, "{}")], id="name-null"),
    pytest.param([{"id": "c1", "type": "function", "function": "calculator"}],
                 id="function-a-string"),
    pytest.param(["calculator"], id="entry-a-string"),
    pytest.param({"id": "c1"}, id="not-a-list"),
])
async def test_a_tool_call_without_id_or_name_is_502_and_nothing_is_stored_or_charged(
        harness: Harness, fake_llm: FakeLLM, calls: Any) -> None:
    auth = await harness.user()
    before = await snapshot(harness, auth)
    fake_llm.script.append(Scripted(body=tool_calls_body(calls)))

    response = await harness.chat(auth, "use a tool")

    await assert_json_error(response, 502, "provider_error")
    assert await snapshot(harness, auth) == before


async def test_a_call_answered_before_a_later_failure_is_still_billed(
        start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway(llm_max_retries=0)
    auth = await harness.user("alice", credits=1000)
    fake_llm.script += [
        Scripted(body=tool_calls_body([call("c1", "calculator", '{"expression": "2+3"}')])),
        Scripted(raw=deep_array(DEEP).encode())]

    response = await harness.chat(auth, "what is 2+3?")

    await assert_json_error(response, 502, "provider_error")
    row = await only_chat_row(harness)  # the first call answered: billed
    assert (row.prompt_tokens, row.completion_tokens, row.credits) == (10, 5, 1)
    assert (await credits_body(harness, auth))["credits"] == 999
    assert (await harness.client.get("/api/threads/t1", headers=auth)).status == 404
    assert not (harness.gateway.settings.sessions_dir / "alice--t1.jsonl").exists()


# --- concurrency: never below one call's cost; "busy" while the credits are only held ---------
async def test_fifty_concurrent_turns_on_five_credits_are_busy_not_refused_while_held(
        start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    price = Price(1.0, 6.0)  # one call at the bounds costs well over five credits
    harness = await start_gateway(prices={"default": price})
    auth = await harness.user("alice", plan="team", credits=5)
    release = asyncio.Event()  # the calls in flight answer once every other turn was refused
    fake_llm.responder = lambda request: Scripted(body=completion(
        "ok", prompt_bound(request), MAX_TOKENS + 64), release=release)  # the most believed

    async def one(thread: str) -> tuple[int, str | None, dict[str, Any]]:
        response = await harness.chat(auth, "hello", thread=thread)
        return response.status, response.headers.get("Retry-After"), await response.json()

    turns = [asyncio.ensure_future(one(f"t{i}")) for i in range(50)]
    await until(lambda: sum(t.done() for t in turns) + len(fake_llm.requests) == 50, 30)
    release.set()
    results = await asyncio.wait_for(asyncio.gather(*turns), 60)

    in_flight = len(fake_llm.requests)
    statuses = [status for status, _, _ in results]
    assert statuses.count(200) == in_flight >= 1
    # Every refusal happened while the balance was still 5 and only held by the turns in
    # flight: "busy, retry" with a short Retry-After, not "no credits left".
    refused = [(status, retry, body["error"]["code"]) for status, retry, body in results
               if status != 200]
    assert refused == [(429, "1", "credits_busy")] * (50 - in_flight)
    balance = (await credits_body(harness, auth))["credits"]
    worst = max(max_call_cost(r, price) for r in fake_llm.requests)
    assert balance >= -worst  # never further below zero than one call's cost
    assert balance == 5 - worst * in_flight
    await assert_ledger_matches_balances(harness.gateway, "alice")
    # Now the balance itself is spent: the next turn is 402, before any provider call.
    await assert_json_error(await harness.chat(auth, "more?", thread="late"), 402,
                            "out_of_credits")
    assert len(fake_llm.requests) == in_flight


async def test_one_credit_and_usage_far_above_the_reservation_end_within_one_call_of_zero(
        start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway()
    auth = await harness.user("alice", plan="team", credits=1)
    fake_llm.responder = lambda request: Scripted(
        body=completion("ok", 400_000, 400_000), delay=0.05)  # ~1,600 credits if believed

    async def one(thread: str) -> tuple[int, str | None]:
        response = await harness.chat(auth, "hello", thread=thread)
        return response.status, response.headers.get("Retry-After")

    results = await asyncio.wait_for(asyncio.gather(*(one(f"t{i}") for i in range(20))), 60)

    assert {status for status, _ in results} <= {200, 402, 429}
    assert all(retry == "1" for status, retry in results if status == 429)
    assert [status for status, _ in results].count(200) == len(fake_llm.requests) >= 1
    balance = (await credits_body(harness, auth))["credits"]
    assert balance >= 1 - max(max_call_cost(r) for r in fake_llm.requests)
    ledger = await assert_ledger_matches_balances(harness.gateway, "alice")
    for row, request in zip(ledger[1:], fake_llm.requests, strict=True):
        assert row.prompt_tokens == tiktoken_prompt_tokens(request)  # our count, not 400,000


def test_a_refusal_is_busy_while_other_turns_hold_the_credits_and_402_once_spent() -> None:
    guard = CreditGuard()
    with guard.admit("alice") as first, guard.admit("alice") as second:
        first.reserve(5, estimate=8)
        with pytest.raises(CreditsBusy) as busy:
            second.reserve(5, estimate=8)
        assert (busy.value.status, busy.value.code, busy.value.retry_after) == (
            429, "credits_busy", 1.0)
        first.settle(8)  # the call cost its whole reservation: 5 - 8 = -3
        with pytest.raises(PaymentRequired):
            second.reserve(5, estimate=8)  # what it read (5) less what was charged since (8)
    with guard.admit("alice") as later:
        with pytest.raises(PaymentRequired):
            later.reserve(-3, estimate=8)
        with pytest.raises(PaymentRequired):
            later.require(0)


def test_json_nesting_is_measured_without_recursion() -> None:
    assert not nests_deeper_than('{"a":' * 64 + "1" + "}" * 64, 64)
    assert nests_deeper_than('{"a":' * 65 + "1" + "}" * 65, 64)
    assert nests_deeper_than(deep_array(10**6), 64)
    assert not nests_deeper_than(json.dumps({"text": "[" * 100 + '\\"{' * 100}), 64)
    assert not nests_deeper_than("[" * 30 + "]" * 30 + "[" * 30 + "]" * 30, 64)


async def test_provider_error_details_stay_in_the_log(start_gateway: StartGateway,
                                                      fake_llm: FakeLLM) -> None:
    harness = await start_gateway(llm_max_retries=0)
    auth = await harness.user()
    fake_llm.script = [Scripted(status=400, body={"error": {
        "message": "org-internal-quota-id 4242 exceeded"}})]
    response = await harness.chat(auth, "hi")
    error = await assert_json_error(response, 502)
    assert "4242" not in error["message"]
