"""The OpenAI-compatible endpoint (SPEC §16), called with the official ``openai`` SDK as its
users call it: sync and async clients, streaming, ``extra_headers``, OpenAI-shaped errors; memory
and billing are those of ``/chat``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest

from gateway.testing.fake_llm import FakeLLM, Scripted, completion, tool_call_completion
from tests.conftest import Harness

THREAD = {"X-CloudyBot-Thread": "sdk-thread"}


def base_url(harness: Harness) -> str:
    return str(harness.client.make_url("/v1"))


SDK: list[openai.AsyncOpenAI] = []


@pytest.fixture(autouse=True)
async def close_clients() -> AsyncIterator[None]:
    """Every SDK client a test made is closed after it (no socket left open)."""
    yield
    while SDK:
        await SDK.pop().close()


async def async_client(harness: Harness, token: str) -> openai.AsyncOpenAI:
    client = openai.AsyncOpenAI(api_key=token, base_url=base_url(harness), max_retries=0,
                                http_client=httpx.AsyncClient(trust_env=False))
    SDK.append(client)
    return client


async def token_of(harness: Harness, user_id: str = "alice") -> str:
    _, token = await harness.gateway.accounts.add_user(user_id)
    return token


async def test_a_completion_is_a_turn_of_the_named_thread(harness: Harness,
                                                         fake_llm: FakeLLM) -> None:
    client = await async_client(harness, await token_of(harness))
    answer = await client.chat.completions.create(
        model=harness.gateway.settings.llm_model, extra_headers=THREAD,
        messages=[{"role": "system", "content": "ignored: memory supplies the rest"},
                  {"role": "user", "content": "hello there"}])

    assert answer.object == "chat.completion"
    assert answer.choices[0].message.content == "echo: hello there"
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None and answer.usage.total_tokens == (
        answer.usage.prompt_tokens + answer.usage.completion_tokens) > 0
    # The thread's memory, as /chat keeps it: the request's other messages are not stored.
    page = await harness.gateway.store.display_page("alice--sdk-thread", 10, None)
    assert [m.content for m in page.messages] == ["hello there", "echo: hello there"]
    assert [row.kind for row in await harness.gateway.store.ledger("alice")][-1] == "chat"
    # The next turn sees the first from memory, though the request sends only its own.
    await client.chat.completions.create(model=harness.gateway.settings.llm_model,
                                         extra_headers=THREAD,
                                         messages=[{"role": "user", "content": "again"}])
    sent = [m["content"] for m in fake_llm.chat_requests[-1].messages[1:]]
    assert sent == ["hello there", "echo: hello there", "again"]


async def test_the_sync_client_and_metadata_thread_id_work_too(harness: Harness) -> None:
    token = await token_of(harness)

    def call() -> Any:
        with openai.OpenAI(api_key=token, base_url=base_url(harness), max_retries=0,
                           http_client=httpx.Client(trust_env=False)) as client:
            return client.chat.completions.create(
                model=harness.gateway.settings.llm_model,
                metadata={"thread_id": "from-metadata"},
                messages=[{"role": "user", "content": [{"type": "text", "text": "parts"}]}])

    answer = await asyncio.to_thread(call)
    assert answer.choices[0].message.content == "echo: parts"
    assert await harness.gateway.store.get_thread("alice--from-metadata") is not None


async def test_streaming_sends_chunks_then_usage_then_done(harness: Harness) -> None:
    client = await async_client(harness, await token_of(harness))
    stream = await client.chat.completions.create(
        model=harness.gateway.settings.llm_model, extra_headers=THREAD, stream=True,
        stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "stream this reply please"}])
    chunks = [chunk async for chunk in stream]

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "echo: stream this reply please"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens > 0


async def test_models_list_the_model_and_the_users_specialists(harness: Harness) -> None:
    token = await token_of(harness)
    await harness.gateway.store.put_specialist("alice", "chef", "You cook.")
    client = await async_client(harness, token)
    models = [model.id async for model in client.models.list()]
    assert models == [harness.gateway.settings.llm_model, "cloudybot/chef"]
    answer = await client.chat.completions.create(
        model="cloudybot/chef", extra_headers=THREAD,
        messages=[{"role": "user", "content": "dinner?"}])
    assert answer.model == "cloudybot/chef"


async def test_errors_are_openai_shaped(harness: Harness) -> None:
    client = await async_client(harness, await token_of(harness))
    model = harness.gateway.settings.llm_model
    with pytest.raises(openai.BadRequestError) as missing:
        await client.chat.completions.create(model=model,
                                             messages=[{"role": "user", "content": "hi"}])
    assert missing.value.code == "missing_thread"
    assert missing.value.type == "invalid_request_error"
    with pytest.raises(openai.NotFoundError) as unknown:
        await client.chat.completions.create(model="gpt-nope", extra_headers=THREAD,
                                             messages=[{"role": "user", "content": "hi"}])
    assert unknown.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as bad_thread:
        await client.chat.completions.create(
            model=model, extra_headers={"X-CloudyBot-Thread": "../etc"},
            messages=[{"role": "user", "content": "hi"}])
    assert bad_thread.value.code == "invalid_thread_id"
    with pytest.raises(openai.BadRequestError) as no_user:
        await client.chat.completions.create(
            model=model, extra_headers=THREAD,
            messages=[{"role": "assistant", "content": "only me"}])
    assert no_user.value.code == "invalid_messages"
    stranger = await async_client(harness, "not-a-token")
    with pytest.raises(openai.AuthenticationError) as refused:
        await stranger.models.list()
    assert refused.value.type == "authentication_error"


async def test_more_than_one_choice_is_refused_not_answered_once(
        harness: Harness, fake_llm: FakeLLM) -> None:
    client = await async_client(harness, await token_of(harness))
    model = harness.gateway.settings.llm_model
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as many:
            await client.chat.completions.create(
                model=model, extra_headers=THREAD, n=3, stream=stream,
                messages=[{"role": "user", "content": "three answers please"}])
        assert (many.value.code, many.value.param) == ("unsupported_value", "n")
        assert many.value.type == "invalid_request_error"  # type: ignore[attr-defined]
    # refused before the turn: nothing asked of the model, stored or billed
    assert fake_llm.chat_requests == []
    assert await harness.gateway.store.get_thread("alice--sdk-thread") is None
    assert "chat" not in [row.kind for row in await harness.gateway.store.ledger("alice")]
    headers = {"Authorization": f"Bearer {client.api_key}", **THREAD}
    for n in (0, -1, 1.5, "1", True, [1]):
        response = await harness.client.post("/v1/chat/completions", headers=headers, json={
            "n": n, "messages": [{"role": "user", "content": "hi"}]})
        assert response.status == 400, n
        error = (await response.json())["error"]
        assert (error["code"], error["param"], error["type"]) == (
            "invalid_value", "n", "invalid_request_error"), n
    for n in (1, None):  # one choice, asked for or not: answered as before
        answer = await client.chat.completions.create(
            model=model, extra_headers=THREAD, n=n,
            messages=[{"role": "user", "content": "one answer"}])
        assert [c.message.content for c in answer.choices] == ["echo: one answer"]


async def test_a_user_out_of_credits_hears_insufficient_quota(harness: Harness) -> None:
    _, token = await harness.gateway.accounts.add_user("bob", credits=0)
    client = await async_client(harness, token)
    with pytest.raises(openai.APIStatusError) as spent:
        await client.chat.completions.create(
            model=harness.gateway.settings.llm_model, extra_headers=THREAD,
            messages=[{"role": "user", "content": "hi"}])
    assert spent.value.status_code == 402
    assert spent.value.type == "insufficient_quota"  # type: ignore[attr-defined]


async def test_bad_bodies_are_400_not_500(harness: Harness) -> None:
    headers = {"Authorization": f"Bearer {await token_of(harness)}", **THREAD}
    for body in (b"not json", b"[]", b'{"messages": "x"}', b'{"messages": [1, 2]}',
                 b'{"messages": [{"role": "user", "content": [1]}]}',
                 b'{"messages": [{"role": "user", "content": 5}]}'):
        response = await harness.client.post("/v1/chat/completions", data=body,
                                             headers=headers)
        assert response.status == 400, body
        error = (await response.json())["error"]
        assert set(error) == {"message", "type", "code", "param"}


async def test_fields_of_the_wrong_type_are_400_not_ignored(harness: Harness,
                                                            fake_llm: FakeLLM) -> None:
    headers = {"Authorization": f"Bearer {await token_of(harness)}", **THREAD}
    hello = [{"role": "user", "content": "hi"}]
    for extra, param in (({"stream": "yes"}, "stream"), ({"stream": 1}, "stream"),
                         ({"stream_options": {"include_usage": {}}},
                          "stream_options.include_usage"),
                         ({"stream_options": []}, "stream_options"),
                         ({"metadata": "t1"}, "metadata"), ({"model": 5}, "model"),
                         ({"messages": [7, *hello]}, "messages"),
                         ({"messages": [{"content": "x"}, *hello]}, "messages"),
                         ({"messages": [{"role": "system", "content": 5}, *hello]}, "messages")):
        response = await harness.client.post("/v1/chat/completions", headers=headers,
                                             json={"messages": hello, **extra})
        assert response.status == 400, extra
        assert (await response.json())["error"]["param"] == param, extra
    # metadata.thread_id is checked even when the header names the thread
    response = await harness.client.post("/v1/chat/completions", headers=headers, json={
        "messages": hello, "metadata": {"thread_id": ".."}})
    assert response.status == 400
    assert (await response.json())["error"]["code"] == "invalid_thread_id"
    assert fake_llm.chat_requests == []
    # null is "not given", as OpenAI's SDKs send it
    response = await harness.client.post("/v1/chat/completions", headers=headers, json={
        "messages": hello, "stream": None, "stream_options": None, "metadata": None,
        "model": None})
    assert response.status == 200


async def test_a_stream_whose_reply_starts_over_ends_with_the_stored_reply(
        harness: Harness, fake_llm: FakeLLM) -> None:
    client = await async_client(harness, await token_of(harness))
    fake_llm.script += [
        Scripted(body=tool_call_completion([("call_1", "calculator", '{"expression": "2+3"}')],
                                           content="Let me check.")),
        Scripted(body=completion("It is 5."))]
    stream = await client.chat.completions.create(
        model=harness.gateway.settings.llm_model, extra_headers=THREAD, stream=True,
        messages=[{"role": "user", "content": "what is 2+3?"}])
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    # What was shown cannot be taken back; the stored reply follows it, whole.
    assert text == "Let me check.\n\nIt is 5."
    page = await harness.gateway.store.display_page("alice--sdk-thread", 10, None)
    assert page.messages[-1].content == "It is 5."
