"""The ``anthropic`` provider (issue 16) against a fake Messages API on loopback: the gateway's
chat shape mapped both ways (system text, alternating turns, tool_use and tool_result), usage
billed, streaming into ``/chat``'s events, retries and refusals."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from plugins.anthropic import EARLIER_MESSAGES, to_anthropic
from tests.conftest import Harness
from tests.fakes.anthropic import KEY, FakeAnthropic, Scripted, message, text, tool_use
from tests.fakes.mcp_server import PIXEL
from tests.test_mcp import stdio


@pytest.fixture
def start_on_anthropic(start_gateway: Callable[..., Awaitable[Harness]],
                       anthropic: FakeAnthropic) -> Callable[..., Awaitable[Harness]]:
    async def start(**overrides: Any) -> Harness:
        return await start_gateway(llm_provider="anthropic", llm_model="claude-fake",
                                   anthropic_base_url=anthropic.url, anthropic_api_key=KEY,
                                   anthropic_max_retries=1, **overrides)
    return start


async def test_a_turn_is_a_messages_call_and_its_usage_is_billed(
        start_on_anthropic: Callable[..., Awaitable[Harness]], anthropic: FakeAnthropic) -> None:
    harness = await start_on_anthropic()
    alice = await harness.user("alice")
    response = await harness.chat(alice, "hello claude")
    assert response.status == 200, await response.text()
    answer = await response.json()

    assert answer["reply"] == "echo: hello claude"
    assert (answer["usage"]["promptTokens"], answer["usage"]["completionTokens"]) == (21, 7)
    [sent] = anthropic.requests
    assert sent["model"] == "claude-fake" and sent["max_tokens"] > 0
    assert "CloudyBot" in sent["system"]  # the system prompt is Anthropic's system text
    assert sent["messages"] == [{"role": "user",
                                 "content": [{"type": "text", "text": "hello claude"}]}]
    assert {tool["name"] for tool in sent["tools"]} >= {"calculator", "current_time"}
    assert all("input_schema" in tool for tool in sent["tools"])
    [row] = [r for r in await harness.gateway.store.ledger("alice") if r.kind == "chat"]
    assert (row.prompt_tokens, row.completion_tokens) == (21, 7)


async def test_tool_use_is_run_and_its_result_goes_back_as_tool_result(
        start_on_anthropic: Callable[..., Awaitable[Harness]], anthropic: FakeAnthropic) -> None:
    anthropic.script = [
        Scripted(message(text("Let me compute."),
                         tool_use("toolu_1", "calculator", {"expression": "6*7"}))),
        Scripted(message(text("It is 42.")))]
    harness = await start_on_anthropic()
    alice = await harness.user("alice")
    response = await harness.chat(alice, "what is six times seven?")
    assert (await response.json())["reply"] == "It is 42."

    second = anthropic.requests[1]["messages"]
    assert [turn["role"] for turn in second] == ["user", "assistant", "user"]
    assistant = second[1]["content"]
    assert {"type": "tool_use", "id": "toolu_1", "name": "calculator",
            "input": {"expression": "6*7"}} in assistant
    [result] = [b for b in second[2]["content"] if b["type"] == "tool_result"]
    assert result["tool_use_id"] == "toolu_1" and "42" in result["content"]


async def test_a_tool_s_picture_follows_its_result_in_the_same_user_turn(
        start_on_anthropic: Callable[..., Awaitable[Harness]], anthropic: FakeAnthropic,
        tmp_path: Path) -> None:
    """An MCP tool's picture, for a vision model: after the tool_result (which the API wants
    first in its turn), as an image block."""
    anthropic.script = [Scripted(message(tool_use("toolu_1", "files__picture", {}))),
                        Scripted(message(text("A dot.")))]
    harness = await start_on_anthropic(llm_vision=True, mcp_servers=json.dumps(
        {"files": stdio(tmp_path / "mcp.log", plans=["*"])}))
    response = await harness.chat(await harness.user("alice"), "draw")
    assert (await response.json())["reply"] == "A dot.", anthropic.refusals
    last = anthropic.requests[1]["messages"][-1]
    assert last["role"] == "user"
    assert [block["type"] for block in last["content"]] == ["tool_result", "text", "text",
                                                           "image"]
    assert last["content"][-1]["source"] == {"type": "base64", "media_type": "image/png",
                                             "data": PIXEL}


async def test_a_streamed_turn_hands_text_on_as_it_arrives(
        start_on_anthropic: Callable[..., Awaitable[Harness]], anthropic: FakeAnthropic) -> None:
    anthropic.script = [Scripted(message(text("streamed back to you")))]
    harness = await start_on_anthropic()
    alice = await harness.user("alice")
    response = await harness.client.post(
        "/chat", json={"threadId": "t1", "message": "stream"},
        headers={**alice, "Accept": "text/event-stream"})
    events = [line for line in (await response.text()).splitlines()
              if line.startswith("data:")]
    deltas = [json.loads(line[5:])["text"] for line in events[:-1]]
    done = json.loads(events[-1][5:])
    assert "".join(deltas) == "streamed back to you" and len(deltas) > 1
    assert done["reply"] == "streamed back to you"
    assert done["usage"]["completionTokens"] == 7
    assert anthropic.requests[0]["stream"] is True


async def test_overloaded_is_retried_and_a_refusal_is_a_502(
        start_on_anthropic: Callable[..., Awaitable[Harness]], anthropic: FakeAnthropic) -> None:
    anthropic.script = [Scripted({"type": "error", "error": {"type": "overloaded_error"}},
                                 status=529, headers={"Retry-After": "0"})]
    harness = await start_on_anthropic()
    alice = await harness.user("alice")
    assert (await (await harness.chat(alice, "again")).json())["reply"] == "echo: again"
    assert len(anthropic.requests) == 2

    anthropic.script = [Scripted({"type": "error", "error": {
        "type": "invalid_request_error", "message": "no"}}, status=400)]
    refused = await harness.chat(alice, "bad")
    assert refused.status == 502
    assert (await refused.json())["error"]["code"] == "provider_error"


async def test_a_wrong_key_is_a_502_and_the_key_never_reaches_the_client(
        start_gateway: Callable[..., Awaitable[Harness]], anthropic: FakeAnthropic) -> None:
    harness = await start_gateway(llm_provider="anthropic", anthropic_base_url=anthropic.url,
                                  anthropic_api_key="sk-ant-wrong", anthropic_max_retries=0)
    alice = await harness.user("alice")
    response = await harness.chat(alice, "hi")
    assert response.status == 502 and "sk-ant-wrong" not in await response.text()


async def test_a_malformed_answer_is_a_502(
        start_on_anthropic: Callable[..., Awaitable[Harness]], anthropic: FakeAnthropic) -> None:
    anthropic.script = [Scripted({"type": "message", "content": "not blocks"}),
                        Scripted(message(tool_use("", "calculator", {})))]
    harness = await start_on_anthropic()
    alice = await harness.user("alice")
    for _ in range(2):
        assert (await harness.chat(alice, "x")).status == 502


def test_chat_messages_become_alternating_turns() -> None:
    system, turns = to_anthropic([
        {"role": "system", "content": "be brief"},
        {"role": "system", "content": "pinned: name=Ada"},
        {"role": "user", "content": "first"},
        {"role": "user", "content": [
            {"type": "text", "text": "and this picture"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "calculator", "arguments": '{"expression": "1+1"}'}},
            {"id": "c2", "type": "function",
             "function": {"name": "current_time", "arguments": "not json"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"result": "2"}'},
        {"role": "tool", "tool_call_id": "c2", "content": "error"},
    ])
    assert system == "be brief\n\npinned: name=Ada"
    assert [turn["role"] for turn in turns] == ["user", "assistant", "user"]
    assert turns[0]["content"][2] == {"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": "iVBOR"}}
    assert turns[1]["content"] == [
        {"type": "tool_use", "id": "c1", "name": "calculator", "input": {"expression": "1+1"}},
        {"type": "tool_use", "id": "c2", "name": "current_time", "input": {}}]
    assert [b["tool_use_id"] for b in turns[2]["content"]] == ["c1", "c2"]


async def test_a_summarized_thread_with_tool_turns_is_answered_every_turn(
        start_on_anthropic: Callable[..., Awaitable[Harness]], anthropic: FakeAnthropic) -> None:
    """Issue 28: after a summary rolling memory keeps the last five messages, which start
    with a reply; the fake refuses a request that does not start with the user, as the API's
    rules do. Every turn must still be answered, tool turns included."""
    harness = await start_on_anthropic(summarize_at=10, keep_recent=5)
    alice = await harness.user("alice")
    statuses = []
    for number in range(13):
        if number % 3 == 1:  # a turn that uses a tool: its exchange is replayed later
            anthropic.script = [
                Scripted(message(tool_use(f"toolu_{number}", "calculator",
                                          {"expression": f"{number}*2"}))),
                Scripted(message(text(f"It is {number * 2}.")))]
        response = await harness.chat(alice, f"m{number}")
        statuses.append(response.status)
        await harness.gateway.drain()
    assert statuses == [200] * 13, anthropic.refusals
    assert anthropic.refusals == []
    thread = await (await harness.client.get("/api/threads/t1", headers=alice)).json()
    assert thread["summary"] and len(thread["messages"]) < 10
    chats = [request["messages"] for request in anthropic.requests if "tools" in request]
    began_with_a_reply = [turns for turns in chats
                          if turns[0]["content"] == [{"type": "text", "text": EARLIER_MESSAGES}]]
    assert began_with_a_reply  # the history kept began with a reply, and was answered
    assert any(block["type"] == "tool_use" for turns in began_with_a_reply for turn in turns
               for block in turn["content"])  # with a tool exchange replayed in it
    assert chats[-1][-1]["content"] == [{"type": "text", "text": "m12"}]
