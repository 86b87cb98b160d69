"""Redaction never touches the scaffolding the gateway writes (issue 28).

A saved password is redacted in what came from outside — the user's words, the model's text, a
tool call's id, name and arguments, a tool's result — and never in the gateway's own structure:
a chat message's keys and role, a tool call's keys and ``type``, the session file's record keys
and types. Hypothesis once drew the password ``tool_cal``; redacting keys turned ``tool_calls``
into ``[redacted]s`` and a committed turn then failed. Here every protocol word is a password, a
real tool turn runs through the fake OpenAI server, the gateway restarts, and the next turn must
replay the exchange well formed and succeed.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gateway.accounts.secrets import REDACTED
from gateway.plugins.manager import PluginManager
from gateway.testing.fake_llm import FakeLLM, Scripted, completion, tool_call_completion
from gateway.tools import ToolContext
from tests.conftest import Harness
from tests.helpers import session_events
from tests.test_agent_tools import register_tool
from tests.test_redaction import assert_no_form

StartClocked = Callable[..., Awaitable[Harness]]

# The words of the chat protocol and of the session file: keys, roles, types, record kinds.
PROTOCOL_WORDS = ["tool_cal", "tool_calls", "function", "arguments", "role", "assistant",
                  "content", "name", "id", "type", "tool", "user", "tool_call_id",
                  "tool_result", "toolCallId", "replyId", "messageId", "round", "calls"]
# The keys of each kind of session record, as the gateway writes them.
RECORD_KEYS = {
    "session": {"type", "key", "userId", "threadId", "createdAt"},
    "user": {"type", "content", "messageId", "ts"},
    "tool_calls": {"type", "replyId", "round", "content", "calls", "ts"},
    "tool_result": {"type", "replyId", "round", "toolCallId", "content", "ts"},
    "assistant": {"type", "content", "messageId", "toolTokens", "ts"},
    "usage": {"type", "promptTokens", "completionTokens", "credits", "calls", "ts"},
}


async def save_password_as_stored(harness: Harness, user_id: str, password: str) -> None:
    """A saved login straight into the store: passwords shorter than the API's minimum
    (``id``, ``role``) may predate it, and redaction must not take a turn apart for them."""
    gateway = harness.gateway
    blob = gateway.secret_box.seal({"username": "ada", "password": password}, user_id)
    await gateway.store.put_credential(user_id, "example.com", blob)


def expected_replay(password: str) -> list[dict[str, Any]]:
    """The first turn as the next one must show it to the model: the protocol's structure
    whole, the password gone from every value that came from outside."""
    return [
        {"role": "user", "content": "echo it"},
        {"role": "assistant", "content": f"checking {REDACTED}",
         "tool_calls": [{"id": f"call-{REDACTED}", "type": "function",
                         "function": {"name": "echo",
                                      "arguments": json.dumps({"text": REDACTED})}}]},
        {"role": "tool", "tool_call_id": f"call-{REDACTED}",
         "content": json.dumps({"echo": REDACTED})},
        {"role": "assistant", "content": "Echoed."},
    ]


@pytest.mark.parametrize("password", PROTOCOL_WORDS)
async def test_a_protocol_word_as_password_survives_a_tool_turn_and_a_restart(
        start_clocked: StartClocked, fake_llm: FakeLLM, pm: PluginManager,
        password: str) -> None:
    async def echo(arguments: dict[str, Any], context: ToolContext) -> Any:
        return {"echo": arguments["text"]}

    register_tool(pm, "echo", echo)
    first = await start_clocked()
    auth = await first.user()
    await save_password_as_stored(first, "alice", password)
    fake_llm.script += [
        Scripted(body=tool_call_completion(
            [(f"call-{password}", "echo", json.dumps({"text": password}))],
            content=f"checking {password}")),
        Scripted(body=completion("Echoed.")),
        Scripted(body=completion("Still here."))]

    turn = await first.chat(auth, "echo it")
    assert turn.status == 200, await turn.text()
    assert (await turn.json())["reply"] == "Echoed."
    await first.client.close()

    second = await start_clocked()  # a restart: the exchange comes back from the session file
    events = await session_events(second.gateway)
    assert [e["type"] for e in events] == ["session", "user", "tool_calls", "tool_result",
                                           "assistant", "usage"]
    for event in events:
        assert set(event) == RECORD_KEYS[event["type"]], event
    calls, result = events[2], events[3]
    assert [set(call) for call in calls["calls"]] == [{"id", "name", "arguments"}]
    outside = [calls["content"], *(call[key] for call in calls["calls"] for key in call),
               result["toolCallId"], result["content"]]
    if len(password) >= 8:  # a shorter one is found in ordinary words by the forms' check
        assert_no_form(password, outside)

    again = await second.chat(auth, "again")
    assert again.status == 200, await again.text()
    assert (await again.json())["reply"] == "Still here."
    replayed = [m for m in fake_llm.chat_requests[-1].messages if m["role"] != "system"]
    assert replayed == [*expected_replay(password), {"role": "user", "content": "again"}]


@pytest.mark.parametrize("password", ["assistant", "called", "tool", "user"])
async def test_the_inspector_hides_a_protocol_word_password_in_values_only(
        start_clocked: StartClocked, fake_llm: FakeLLM, pm: PluginManager,
        password: str) -> None:
    async def echo(arguments: dict[str, Any], context: ToolContext) -> Any:
        return {"echo": arguments["text"]}

    register_tool(pm, "echo", echo)
    harness = await start_clocked()
    auth = await harness.user()
    await save_password_as_stored(harness, "alice", password)
    fake_llm.script += [
        Scripted(body=tool_call_completion([("c1", "echo", json.dumps({"text": password}))])),
        Scripted(body=completion("Echoed."))]
    assert (await harness.chat(auth, "echo it")).status == 200

    response = await harness.client.get("/api/threads/t1/context", headers=auth)
    body = await response.json()
    recent = [layer["text"] for layer in body["layers"] if layer["name"] == "recent"]
    assert recent == ["\n".join([
        "user: echo it",
        'assistant called echo({"text": "[redacted]"})',  # redacted when stored
        'tool: {"echo": "[redacted]"}',
        "assistant: Echoed."])]
