"""Every history the core can keep maps to a request the chat APIs' rules accept (issue 28).

Rolling memory keeps the last ``KEEP_RECENT`` messages after a summary and the prompt drops its
oldest units, so what a provider is given may start with a reply, hold a tool result whose call
was cut off or a call whose result was, or empty content. The ``anthropic`` and ``openai``
providers must turn any of it into a request the Messages API / chat completions accept, by
the rules the tests' fakes enforce (``gateway.testing.chat_rules``), losing no text.
"""

from __future__ import annotations

import json
from itertools import count
from typing import Any

import aiohttp
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import CompletionRequest, whole_tool_exchanges
from gateway.testing.chat_rules import anthropic_violation, openai_violation
from gateway.testing.fake_llm import FakeLLM
from plugins.anthropic import EARLIER_MESSAGES, AnthropicProvider, to_anthropic
from plugins.openai import OpenAIProvider
from tests.fakes.anthropic import KEY, FakeAnthropic

PROPERTY = settings(max_examples=300, deadline=None, database=None)
PICTURE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}}


def anthropic_payload(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The body the ``anthropic`` provider sends for ``messages``."""
    provider = AnthropicProvider("http://127.0.0.1:9", KEY, 1.0, 0)
    return provider._payload(CompletionRequest(messages, "claude-fake", 100))


def openai_payload(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The body the ``openai`` provider sends for ``messages``."""
    provider = OpenAIProvider("http://127.0.0.1:9/v1", "sk-test", 1.0, 0)
    return provider._payload(CompletionRequest(messages, "gpt-fake", 100))


# --- histories as the core keeps them --------------------------------------------------------
# Text that may be empty or blank, as content can be.
texts = st.one_of(st.sampled_from(["", " ", "\n"]), st.text(min_size=1, max_size=12))


@st.composite
def user_messages(draw: st.DrawFn) -> dict[str, Any]:
    """A user message: text, or text with a picture (``/chat`` with images)."""
    text = draw(texts)
    if draw(st.booleans()):
        return {"role": "user", "content": text}
    return {"role": "user", "content": [{"type": "text", "text": text}, PICTURE]}


@st.composite
def tool_rounds(draw: st.DrawFn, ids: count[int]) -> list[dict[str, Any]]:
    """One round of the agent loop: the model's calls, then their results (in any order)."""
    calls = [{"id": f"call_{next(ids)}", "type": "function",
              "function": {"name": draw(st.sampled_from(["calculator", "current_time"])),
                           "arguments": draw(st.sampled_from(['{"expression": "1+1"}', "{}",
                                                              "", "not json"]))}}
             for _ in range(draw(st.integers(1, 3)))]
    content = draw(st.one_of(st.none(), texts))
    results = [{"role": "tool", "tool_call_id": call["id"], "content": draw(texts)}
               for call in calls]
    return [{"role": "assistant", "content": content, "tool_calls": calls},
            *draw(st.permutations(results))]


@st.composite
def conversations(draw: st.DrawFn, ids: count[int]) -> list[dict[str, Any]]:
    """Whole turns as a thread stores and replays them: the user's message, the tool rounds
    that led to the reply, the reply."""
    messages: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 6))):
        messages.append(draw(user_messages()))
        for _ in range(draw(st.integers(0, 2))):
            messages += draw(tool_rounds(ids))
        messages.append({"role": "assistant", "content": draw(texts)})
    return messages


@st.composite
def kept_histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A request the core can make: system text, the history kept (cut at any point at either
    end, as the keep-recent window and trimming cut it), the new message, and the tool rounds
    of the turn so far."""
    ids = count()
    history = draw(conversations(ids))
    start = draw(st.integers(0, len(history)))
    end = draw(st.integers(start, len(history)))
    live = [message for _ in range(draw(st.integers(0, 2))) for message in draw(tool_rounds(ids))]
    return [{"role": "system", "content": draw(texts)}, *history[start:end],
            draw(user_messages()), *live]


@st.composite
def any_histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Messages in any order around a user message: results of calls never made or made
    twice, calls never answered, replies in a row, system text anywhere."""
    ids = count()
    pieces = st.one_of(
        user_messages().map(lambda message: [message]),
        texts.map(lambda text: [{"role": "assistant", "content": text}]),
        texts.map(lambda text: [{"role": "system", "content": text}]),
        st.builds(lambda number, text: [{"role": "tool", "tool_call_id": f"call_{number}",
                                         "content": text}], st.integers(0, 8), texts),
        tool_rounds(ids),
        tool_rounds(ids).map(lambda round_: round_[:1]),  # calls whose results are gone
    )
    drawn = draw(st.lists(pieces, max_size=14))
    # every request of the core has a user message (the new one): somewhere among the rest
    drawn.insert(draw(st.integers(0, len(drawn))), [draw(user_messages())])
    return [message for piece in drawn for message in piece]


histories = st.one_of(kept_histories(), any_histories())


def texts_of(messages: list[dict[str, Any]]) -> set[str]:
    """The non-blank texts ``messages`` say (content and tool results, not system text)."""
    found = set()
    for message in messages:
        if message.get("role") == "system":
            continue
        content = message.get("content")
        parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
        found |= {part["text"] for part in parts
                  if isinstance(part.get("text"), str) and part["text"].strip()}
    return found


def anthropic_texts(turns: list[dict[str, Any]]) -> str:
    """Every text an Anthropic request holds, in one string."""
    return "\n".join(str(block.get("text", "")) + str(block.get("content", ""))
                     for turn in turns for block in turn["content"])


@PROPERTY
@given(histories)
def test_any_history_maps_to_a_request_anthropic_accepts(messages: list[dict[str, Any]]) -> None:
    payload = anthropic_payload(messages)
    assert anthropic_violation(payload) is None, json.dumps(payload["messages"], indent=1)
    sent = anthropic_texts(payload["messages"])
    assert all(text.rstrip() in sent for text in texts_of(messages))  # nothing said is lost


@PROPERTY
@given(histories)
def test_any_history_maps_to_a_request_openai_accepts(messages: list[dict[str, Any]]) -> None:
    payload = openai_payload(messages)
    assert openai_violation(payload) is None, json.dumps(payload["messages"], indent=1)
    sent = json.dumps(payload["messages"])
    assert all(json.dumps(text)[1:-1] in sent for text in texts_of(messages))


@PROPERTY
@given(conversations(count()))
def test_a_whole_history_is_sent_as_it_is(messages: list[dict[str, Any]]) -> None:
    whole = [m for m in messages if m["role"] != "assistant" or m["content"] or
             m.get("tool_calls")]
    assert whole_tool_exchanges(messages) == whole
    assert openai_payload(messages)["messages"] == whole


# --- the cases the issue names --------------------------------------------------------------
def test_a_history_kept_after_a_summary_starts_with_a_user_turn() -> None:
    _, turns = to_anthropic([
        {"role": "system", "content": "Summary of the earlier conversation: ..."},
        {"role": "assistant", "content": "echo: m2"},
        {"role": "user", "content": "m3"}])
    assert turns == [
        {"role": "user", "content": [{"type": "text", "text": EARLIER_MESSAGES}]},
        {"role": "assistant", "content": [{"type": "text", "text": "echo: m2"}]},
        {"role": "user", "content": [{"type": "text", "text": "m3"}]}]


def test_a_result_whose_call_was_cut_off_becomes_user_text() -> None:
    _, turns = to_anthropic([
        {"role": "tool", "tool_call_id": "call_1", "content": '{"result": "42"}'},
        {"role": "assistant", "content": "It is 42."},
        {"role": "user", "content": "thanks"}])
    assert [turn["role"] for turn in turns] == ["user", "assistant", "user"]
    [block] = turns[0]["content"]
    assert block["type"] == "text" and block["text"].endswith('{"result": "42"}')
    assert "tool call" in block["text"]


def test_a_call_whose_result_was_cut_off_is_answered_no_result() -> None:
    calls = [{"id": "call_1", "type": "function",
              "function": {"name": "calculator", "arguments": "{}"}}]
    messages = [{"role": "user", "content": "compute"},
                {"role": "assistant", "content": None, "tool_calls": calls},
                {"role": "user", "content": "next"}]
    repaired = whole_tool_exchanges(messages)
    assert repaired[2]["role"] == "tool" and repaired[2]["tool_call_id"] == "call_1"
    assert "No result" in repaired[2]["content"]
    _, turns = to_anthropic(messages)
    assert turns[2]["content"][0]["type"] == "tool_result"
    assert turns[2]["content"][1] == {"type": "text", "text": "next"}


def test_empty_content_is_left_out_and_its_neighbours_merged() -> None:
    _, turns = to_anthropic([
        {"role": "user", "content": "a"}, {"role": "assistant", "content": ""},
        {"role": "user", "content": [{"type": "text", "text": ""}]},
        {"role": "user", "content": " "}, {"role": "user", "content": "b"}])
    assert turns == [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                  {"type": "text", "text": "b"}]}]


def test_call_ids_anthropic_refuses_are_replaced_in_the_call_and_its_result() -> None:
    def exchange(call_id: str) -> list[dict[str, Any]]:
        return [{"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": "calculator", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": call_id, "content": "2"}]
    _, turns = to_anthropic([{"role": "user", "content": "go"}, *exchange("fc.1:a"),
                             *exchange("call_0"), *exchange("call_0")])
    uses = [b["id"] for t in turns for b in t["content"] if b["type"] == "tool_use"]
    results = [b["tool_use_id"] for t in turns for b in t["content"]
               if b["type"] == "tool_result"]
    assert uses == results and len(set(uses)) == 3 and uses[1] == "call_0"
    assert anthropic_violation({"messages": turns}) is None


# --- the fakes refuse what the real APIs refuse ------------------------------------------------
async def post(url: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
    """POST ``body`` as JSON; the status and the JSON answer."""
    async with aiohttp.ClientSession() as session, \
            session.post(url, json=body, headers=headers) as response:
        return response.status, await response.json()


ANTHROPIC_HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
USE = {"type": "tool_use", "id": "toolu_1", "name": "calculator", "input": {}}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "2"}
ANTHROPIC_REFUSED = {
    "first message must use the \"user\" role": [
        {"role": "assistant", "content": "hi"}, {"role": "user", "content": "hello"}],
    "roles must alternate": [
        {"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
    "unexpected `tool_use_id`": [
        {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
        {"role": "user", "content": [RESULT]}],
    "without `tool_result` blocks immediately after": [
        {"role": "user", "content": "a"}, {"role": "assistant", "content": [USE]},
        {"role": "user", "content": "b"}],
    "tool_result blocks must come first": [
        {"role": "user", "content": "a"}, {"role": "assistant", "content": [USE]},
        {"role": "user", "content": [{"type": "text", "text": "b"}, RESULT]}],
    "non-empty content": [{"role": "user", "content": ""}],
    "non-whitespace text": [{"role": "user", "content": [{"type": "text", "text": " "}]}],
    "at least one message": [],
}


async def test_the_fake_messages_api_refuses_what_the_real_one_refuses() -> None:
    fake = FakeAnthropic()
    await fake.start()
    try:
        for reason, messages in ANTHROPIC_REFUSED.items():
            status, answer = await post(f"{fake.url}/v1/messages",
                                        {"model": "m", "max_tokens": 5, "messages": messages},
                                        ANTHROPIC_HEADERS)
            assert status == 400, reason
            assert answer["type"] == "error"
            assert answer["error"]["type"] == "invalid_request_error"
            assert reason in answer["error"]["message"]
        status, _ = await post(f"{fake.url}/v1/messages", {
            "model": "m", "max_tokens": 5, "messages": [
                {"role": "user", "content": "a"}, {"role": "assistant", "content": [USE]},
                {"role": "user", "content": [RESULT, {"type": "text", "text": "b"}]}]},
            ANTHROPIC_HEADERS)
        assert status == 200
    finally:
        await fake.close()


CALL = {"id": "call_1", "type": "function", "function": {"name": "calculator",
                                                         "arguments": "{}"}}
OPENAI_REFUSED = {
    "must be a response to a preceeding message with 'tool_calls'": [
        {"role": "user", "content": "a"}, {"role": "tool", "tool_call_id": "call_1",
                                           "content": "2"}],
    "did not have response messages: call_1": [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "user", "content": "b"}],
    "expected a string, got null": [{"role": "assistant", "content": None}],
}


async def test_the_fake_openai_server_refuses_what_openai_refuses() -> None:
    fake = FakeLLM()
    await fake.start()
    try:
        for reason, messages in OPENAI_REFUSED.items():
            status, answer = await post(f"{fake.url}/chat/completions",
                                        {"model": "m", "messages": messages}, {})
            assert status == 400, reason
            assert answer["error"]["type"] == "invalid_request_error"
            assert reason in answer["error"]["message"]
        assert len(fake.refusals) == len(OPENAI_REFUSED)
        status, _ = await post(f"{fake.url}/chat/completions", {"model": "m", "messages": [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": "2"}]}, {})
        assert status == 200
    finally:
        await fake.close()
