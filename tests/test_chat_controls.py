"""The conversation controls over the HTTP API: stopping a streamed turn (``POST
/api/threads/{id}/stop``: what arrived is kept and billed), replacing the last exchange
(``replaceLast``: regenerate, edit and resend), pictures with ``/chat`` (``images``), and a
provider's failure answered in plain words."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gateway.api.chat import PROVIDER_FAILED
from gateway.testing.fake_llm import FakeLLM, Recorded, Scripted, completion
from tests.conftest import Harness
from tests.helpers import assert_json_error
from tests.test_chat_events import EVENTS, REPLY, read_events, stream_chat

StartGateway = Callable[..., Awaitable[Harness]]
# the smallest PNG: one transparent pixel
PIXEL = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhf"
                         "DwAChwGA60e6kgAAAABJRU5ErkJggg==")
PIXEL_URL = "data:image/png;base64," + base64.b64encode(PIXEL).decode()


async def display(harness: Harness, auth: dict[str, str], thread: str = "t1") -> list[str]:
    answer = await (await harness.client.get(f"/api/threads/{thread}", headers=auth)).json()
    return [m["content"] for m in answer["display_messages"]]


async def rolling(harness: Harness, auth: dict[str, str], thread: str = "t1") -> list[str]:
    answer = await (await harness.client.get(f"/api/threads/{thread}", headers=auth)).json()
    return [m["content"] for m in answer["messages"]]


async def chat_kinds(harness: Harness, user: str = "alice") -> list[str]:
    return [row.kind for row in await harness.gateway.store.ledger(user)]


# --- stop ---------------------------------------------------------------------------------
async def test_stop_keeps_what_arrived_stores_it_and_bills_the_gateways_count(
        harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    resume = asyncio.Event()  # never set: the model would go on writing, but is stopped
    fake_llm.script = [Scripted(body=completion(REPLY, 40, 30), piece_chars=10, pause_after=3,
                                resume=resume)]
    response = await stream_chat(harness, auth, "why stream?")
    arrived = ""
    while len(arrived) < 30:  # the three pieces the model wrote before it paused
        line = await response.content.readline()
        if line.startswith(b"data: "):
            arrived += json.loads(line[6:])["text"]
    stop = await harness.client.post("/api/threads/t1/stop", headers=auth)
    assert await stop.json() == {"threadId": "t1", "stopped": True}
    events = await read_events(response)
    name, done = events[-1]
    assert name == "done" and done["stopped"] is True
    partial = REPLY[:30]
    assert done["reply"] == arrived == partial
    assert await display(harness, auth) == ["why stream?", partial]
    assert await rolling(harness, auth) == ["why stream?", partial]  # memory has it too
    # the provider reported no usage for a cut stream: the gateway's own count is billed
    [charge] = [row for row in await harness.gateway.store.ledger("alice") if row.kind == "chat"]
    counter = harness.gateway.counter
    assert charge.completion_tokens == done["usage"]["completionTokens"] == counter.count(partial)
    assert charge.prompt_tokens == done["usage"]["promptTokens"] != 40
    assert charge.credits == done["usage"]["credits"] > 0
    # the thread goes on as usual, its next prompt holding the partial reply
    assert (await harness.chat(auth, "go on")).status == 200
    assert fake_llm.requests[-1].messages[-2] == {"role": "assistant", "content": partial}
    resume.set()


async def test_a_stop_before_any_text_stores_and_charges_nothing(
        harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    asked = asyncio.Event()
    never = asyncio.Event()

    def hold(request: Recorded) -> Scripted:
        asked.set()
        return Scripted(body=completion("too late"), release=never)

    fake_llm.responder = hold
    turn = asyncio.ensure_future(stream_chat(harness, auth, "hello"))
    await asked.wait()
    stop = await harness.client.post("/api/threads/t1/stop", headers=auth)
    assert (await stop.json())["stopped"] is True
    await assert_json_error(await turn, 409, "turn_stopped")
    assert await chat_kinds(harness) == ["grant"]
    assert (await harness.client.get("/api/threads/t1", headers=auth)).status == 404
    never.set()


async def test_stop_reaches_only_the_callers_own_turn(harness: Harness,
                                                      fake_llm: FakeLLM) -> None:
    alice = await harness.user()
    bob = await harness.user("bob")
    resume = asyncio.Event()
    fake_llm.script = [Scripted(body=completion(REPLY), piece_chars=10, pause_after=2,
                                resume=resume)]
    response = await stream_chat(harness, alice, "why stream?")
    assert await response.content.readline() == b"event: delta\n"
    stop = await harness.client.post("/api/threads/t1/stop", headers=bob)
    assert await stop.json() == {"threadId": "t1", "stopped": False}  # bob's t1 runs nothing
    resume.set()
    assert (await read_events(response))[-1][1]["reply"] == REPLY
    idle = await harness.client.post("/api/threads/t1/stop", headers=alice)
    assert await idle.json() == {"threadId": "t1", "stopped": False}  # it had ended


async def test_a_client_going_away_still_does_not_stop_the_turn(harness: Harness,
                                                               fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    resume = asyncio.Event()
    fake_llm.script = [Scripted(body=completion(REPLY), piece_chars=10, pause_after=2,
                                resume=resume)]
    response = await stream_chat(harness, auth, "why stream?")
    await response.content.readline()
    response.close()
    resume.set()
    await harness.gateway.drain()
    assert await display(harness, auth) == ["why stream?", REPLY]


# --- replace the last exchange --------------------------------------------------------------
async def test_regenerate_replaces_the_last_reply_in_memory_and_transcript(
        harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    assert (await harness.chat(auth, "first")).status == 200
    assert (await harness.chat(auth, "hello")).status == 200
    fake_llm.script = [Scripted(body=completion("a better answer"))]
    response = await harness.chat(auth, "hello", replaceLast=True)
    assert (await response.json())["reply"] == "a better answer"
    assert await display(harness, auth) == ["first", "echo: first", "hello", "a better answer"]
    assert await rolling(harness, auth) == ["first", "echo: first", "hello", "a better answer"]
    # the replaced exchange was not in the prompt: the model saw the message once
    sent = [m["content"] for m in fake_llm.requests[-1].messages[1:]]
    assert sent == ["first", "echo: first", "hello"]
    assert await chat_kinds(harness) == ["grant", "chat", "chat", "chat"]  # a new turn, billed


async def test_edit_and_resend_replaces_the_last_exchange_with_the_edited_message(
        harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    await harness.chat(auth, "helo")
    response = await harness.chat(auth, "hello, edited", replaceLast=True)
    assert response.status == 200
    assert await display(harness, auth) == ["hello, edited", "echo: hello, edited"]
    assert [m["content"] for m in fake_llm.requests[-1].messages[1:]] == ["hello, edited"]


async def test_replacing_keeps_the_rolling_window_and_summary_coherent(
        start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway()
    auth = await harness.user(plan="team")
    for number in range(5):  # 10 messages: the older ones are folded into the summary
        await harness.chat(auth, f"m{number}")
    await harness.gateway.drain()
    kept = await rolling(harness, auth)
    assert len(kept) < 10 and kept[-2:] == ["m4", "echo: m4"]
    await harness.chat(auth, "m4 again", replaceLast=True)
    await harness.gateway.drain()
    assert (await rolling(harness, auth))[-2:] == ["m4 again", "echo: m4 again"]
    shown = await display(harness, auth)
    assert len(shown) == 10 and shown[-2:] == ["m4 again", "echo: m4 again"]
    assert "m4" not in [m["content"] for m in fake_llm.chat_requests[-1].messages[1:-1]]


async def test_nothing_to_replace_is_409_and_a_failed_replacement_keeps_the_old(
        start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway(llm_max_retries=0)
    auth = await harness.user()
    await assert_json_error(await harness.chat(auth, "hi", replaceLast=True), 409,
                            "nothing_to_replace")
    assert fake_llm.requests == []
    await harness.chat(auth, "hello")
    fake_llm.script = [Scripted(status=500, body={"error": {"message": "down"}})]
    await assert_json_error(await harness.chat(auth, "hello", replaceLast=True), 502)
    assert await display(harness, auth) == ["hello", "echo: hello"]
    await harness.client.post("/api/threads/t1/clear", headers=auth)
    await assert_json_error(await harness.chat(auth, "hello", replaceLast=True), 409,
                            "nothing_to_replace")
    bad = await harness.chat(auth, "hello", replaceLast="yes")
    await assert_json_error(bad, 400, "invalid_replace_last")


# --- pictures -------------------------------------------------------------------------------
async def test_a_picture_goes_to_a_vision_model_and_is_named_not_stored(
        start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway(llm_vision=True)
    auth = await harness.user()
    response = await harness.chat(auth, "what is this?", images=[PIXEL_URL])
    assert response.status == 200
    content: list[dict[str, Any]] = fake_llm.requests[-1].messages[-1]["content"]
    assert {"type": "image_url", "image_url": {"url": PIXEL_URL}} in content
    assert await display(harness, auth) == ["[picture] what is this?",
                                            "echo: [picture] what is this?"]
    # a picture alone is a message too
    alone = await harness.chat(auth, "", thread="t2", images=[PIXEL_URL, PIXEL_URL])
    assert alone.status == 200
    assert (await display(harness, auth, "t2"))[0] == "[2 pictures]"


@pytest.mark.parametrize(("images", "status", "code"), [
    ("data:image/png;base64,AAAA", 400, "invalid_images"),
    (["data:text/html;base64,PGI+"], 400, "invalid_images"),
    (["data:image/png;base64,@@@@"], 400, "invalid_images"),
    (["https://example.com/cat.png"], 400, "invalid_images"),
    ([PIXEL_URL] * 5, 400, "invalid_images"),
    (["data:image/png;base64," + base64.b64encode(bytes(200)).decode()], 413,
     "image_too_large"),
])
async def test_bad_pictures_are_refused_before_the_model(
        start_gateway: StartGateway, fake_llm: FakeLLM, images: Any, status: int,
        code: str) -> None:
    harness = await start_gateway(llm_vision=True, llm_max_image_bytes=100)
    auth = await harness.user()
    await assert_json_error(await harness.chat(auth, "look", images=images), status, code)
    assert fake_llm.requests == []


async def test_pictures_are_refused_when_the_model_reads_none(harness: Harness,
                                                             fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    session = await (await harness.client.get("/api/session", headers=auth)).json()
    assert session["vision"] is False
    await assert_json_error(await harness.chat(auth, "look", images=[PIXEL_URL]), 400,
                            "images_not_accepted")
    assert fake_llm.requests == []


# --- a provider's failure, in plain words ---------------------------------------------------
async def test_a_provider_failure_reaches_the_user_without_internals(
        start_gateway: StartGateway, fake_llm: FakeLLM,
        caplog: pytest.LogCaptureFixture) -> None:
    harness = await start_gateway(llm_max_retries=0)
    auth = await harness.user()
    caplog.set_level(logging.WARNING)
    fake_llm.script = [Scripted(status=500, body={"error": {"message": "overloaded"}})] * 3
    error = await assert_json_error(await harness.chat(auth, "hello"), 502, "provider_error")
    assert error["message"] == PROVIDER_FAILED
    streamed = await harness.client.post("/chat", json={"threadId": "t1", "message": "hi"},
                                         headers={**auth, **EVENTS})
    assert (await assert_json_error(streamed, 502))["message"] == PROVIDER_FAILED
    assert "HTTP 500" in caplog.text  # the details are in the log
    # the OpenAI-compatible endpoint keeps its OpenAI-style message
    openai = await harness.client.post("/v1/chat/completions", headers=auth, json={
        "messages": [{"role": "user", "content": "hi"}], "metadata": {"thread_id": "o1"}})
    assert "HTTP 500" in (await openai.json())["error"]["message"]


async def test_an_unreachable_provider_does_not_show_its_address(
        start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway(llm_max_retries=0, llm_base_url="http://127.0.0.1:9/v1")
    auth = await harness.user()
    error = await assert_json_error(await harness.chat(auth, "hello"), 502)
    assert error["message"] == PROVIDER_FAILED
    assert "127.0.0.1" not in error["message"]


async def test_a_stream_that_breaks_ends_with_a_plain_error_event(
        start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway(llm_max_retries=0)
    auth = await harness.user()
    fake_llm.script = [Scripted(body=completion(REPLY), piece_chars=6, break_after=3)]
    events = await read_events(await stream_chat(harness, auth, "hello"))
    assert events[-1] == ("error", {"error": {"code": "provider_error",
                                              "message": PROVIDER_FAILED}})
