"""``POST /chat`` with ``Accept: text/event-stream`` (SPEC §13): ``delta`` events as the provider
streams, then exactly one ``done`` with what a plain ``/chat`` answers; failures before the stream
are JSON errors with their status, after it an ``error`` event; a client that goes away does not
cancel the turn."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import ClientResponse

from gateway.testing.fake_llm import FakeLLM, Scripted, completion, tool_call_completion
from tests.conftest import Harness
from tests.helpers import assert_json_error

StartGateway = Callable[..., Awaitable[Harness]]
EVENTS = {"Accept": "text/event-stream"}
REPLY = ("Streaming lets the reader follow along while the model is still writing, "
         "which feels much faster than waiting for the whole answer at once.")


async def read_events(response: ClientResponse) -> list[tuple[str, Any]]:
    """Every (event, data) of a finished event stream, in order."""
    events: list[tuple[str, Any]] = []
    name = ""
    async for raw in response.content:
        line = raw.decode("utf-8").rstrip("\n")
        if line.startswith("event: "):
            name = line[len("event: "):]
        elif line.startswith("data: "):
            events.append((name, json.loads(line[len("data: "):])))
    return events


def reply_of(events: list[tuple[str, Any]]) -> str:
    """The deltas after the last reset, concatenated: the reply as a client assembles it."""
    text = ""
    for name, data in events:
        if name == "reset":
            text = ""
        elif name == "delta":
            text += data["text"]
    return text


async def stream_chat(harness: Harness, auth: dict[str, str], message: str,
                      thread: str = "t1") -> ClientResponse:
    return await harness.client.post("/chat", json={"threadId": thread, "message": message},
                                     headers={**auth, **EVENTS})


async def test_the_reply_arrives_in_deltas_then_one_done_like_a_plain_chat(
        harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    resume = asyncio.Event()
    fake_llm.script = [Scripted(body=completion(REPLY, 40, 30), piece_chars=10, pause_after=3,
                                resume=resume)]
    response = await stream_chat(harness, auth, "why stream?")
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/event-stream")
    # while the model pauses after three pieces, they have reached the client
    seen = [await response.content.readline() for _ in range(3)]
    assert seen[0] == b"event: delta\n" and seen[1].startswith(b"data: ")
    resume.set()
    events = [("delta", json.loads(seen[1][len(b"data: "):])), *await read_events(response)]

    names = [name for name, _ in events]
    assert names.count("delta") >= 2  # the first pieces came before the rest
    assert names[-1] == "done" and names.count("done") == 1
    done = events[-1][1]
    assert reply_of(events) == done["reply"] == REPLY
    assert fake_llm.requests[0].body["stream"] is True
    # the same answer a non-streaming /chat gives, and the same things stored and billed
    fake_llm.script = [Scripted(body=completion(REPLY, 40, 30))]
    plain = await (await harness.chat(auth, "why stream?", thread="t2")).json()
    assert set(done) == set(plain)
    assert done["usage"] == plain["usage"] == {"promptTokens": 40, "completionTokens": 30,
                                               "credits": plain["usage"]["credits"]}
    thread = await (await harness.client.get("/api/threads/t1", headers=auth)).json()
    assert [m["content"] for m in thread["display_messages"]] == ["why stream?", REPLY]


async def test_without_the_accept_header_chat_answers_json(harness: Harness) -> None:
    auth = await harness.user()
    response = await harness.chat(auth, "hello")
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("application/json")
    assert (await response.json())["reply"] == "echo: hello"


async def test_a_failure_before_the_stream_is_a_json_error_with_its_status(
        harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user(credits=0)
    response = await stream_chat(harness, auth, "hello")
    await assert_json_error(response, 402, "out_of_credits")
    response = await harness.client.post("/chat", json={"threadId": "../x", "message": "hi"},
                                         headers={**auth, **EVENTS})
    await assert_json_error(response, 400, "invalid_thread_id")
    assert fake_llm.requests == []


async def test_a_failure_after_the_stream_began_is_an_error_event(
        start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway(llm_max_retries=0)
    auth = await harness.user()
    fake_llm.script = [Scripted(body=completion("Half an answer, and then the line dies"),
                                piece_chars=6, break_after=3)]
    response = await stream_chat(harness, auth, "hello")
    assert response.status == 200
    events = await read_events(response)
    assert events[0][0] == "delta"
    assert events[-1][0] == "error"
    assert events[-1][1]["error"]["code"] == "provider_error"
    assert "done" not in [name for name, _ in events]
    ledger = await harness.gateway.store.ledger("alice")
    assert [row.kind for row in ledger] == ["grant"]  # nothing stored or charged
    assert (await harness.client.get("/api/threads/t1", headers=auth)).status == 404


async def test_a_client_that_disconnects_mid_stream_does_not_cancel_the_turn(
        harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    resume = asyncio.Event()
    fake_llm.script = [Scripted(body=completion(REPLY, 40, 30), piece_chars=10, pause_after=2,
                                resume=resume)]
    response = await stream_chat(harness, auth, "why stream?")
    first = await response.content.readline()
    assert first == b"event: delta\n"
    response.close()  # the reader goes away while the model is still writing
    resume.set()
    await harness.gateway.drain()
    thread = await (await harness.client.get("/api/threads/t1", headers=auth)).json()
    assert [m["content"] for m in thread["display_messages"]] == ["why stream?", REPLY]
    ledger = await harness.gateway.store.ledger("alice")
    assert [(row.kind, row.prompt_tokens, row.completion_tokens) for row in ledger] == [
        ("grant", 0, 0), ("chat", 40, 30)]


async def test_text_written_before_a_tool_call_is_reset_and_the_reply_follows(
        harness: Harness, fake_llm: FakeLLM, pm: Any) -> None:
    from tests.test_agent_tools import register_tool

    async def answer(arguments: dict[str, Any], context: Any) -> Any:
        return {"answer": 42}

    register_tool(pm, "oracle", answer)
    auth = await harness.user()
    fake_llm.script = [
        Scripted(body=tool_call_completion([("c1", "oracle", "{}")], "Let me work that out."),
                 piece_chars=4),
        Scripted(body=completion("It is 42."), piece_chars=3)]
    events = await read_events(await stream_chat(harness, auth, "what is it?"))
    names = [name for name, _ in events]
    assert "reset" in names
    assert reply_of(events) == events[-1][1]["reply"] == "It is 42."


async def test_a_command_streams_its_answer_as_one_delta(harness: Harness,
                                                          fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    events = await read_events(await stream_chat(harness, auth, "/remember name Ada"))
    assert [name for name, _ in events] == ["delta", "done"]
    assert events[-1][1]["command"] == "remember"
    assert reply_of(events) == events[-1][1]["reply"]
    assert events[-1][1]["usage"]["credits"] == 0
    assert fake_llm.requests == []


async def test_leading_and_trailing_space_never_reaches_the_deltas(
        harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    fake_llm.script = [Scripted(body=completion("\n  Spaced out answer.  \n"), piece_chars=3)]
    events = await read_events(await stream_chat(harness, auth, "hi"))
    assert "reset" not in [name for name, _ in events]
    assert reply_of(events) == events[-1][1]["reply"] == "Spaced out answer."


async def test_the_offline_provider_streams_in_several_pieces(
        start_gateway: StartGateway) -> None:
    harness = await start_gateway(llm_provider="offline")
    auth = await harness.user()
    events = await read_events(await stream_chat(harness, auth, "hello there, offline friend"))
    assert [name for name, _ in events].count("delta") >= 3
    assert reply_of(events) == events[-1][1]["reply"]
    assert events[-1][1]["reply"].startswith("(offline mode")
