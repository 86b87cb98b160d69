"""The agent's tool loop end to end: HTTP ``/chat`` → gateway → fake OpenAI server → tools.

The fake answers with OpenAI ``tool_calls``; the gateway must run the tools, send the results
back in OpenAI's format, stop after ``max_tool_rounds``, bill every call, and replay earlier
tool exchanges of the same session (never split, never after a rotation).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gateway import hookimpl
from gateway.config.settings import Settings
from gateway.plugins.manager import PluginManager
from gateway.testing.fake_llm import FakeLLM, Scripted, completion, tool_call_completion
from gateway.tools import Tool, ToolContext
from tests.conftest import Harness
from tests.helpers import session_bytes, session_events
from tests.test_sessions import FakeClock, chat_ok, start_with_clock

StartClocked = Callable[..., Awaitable[Harness]]
PASSWORD = "hunter2-Very-Secret"
CALC_2_PLUS_3 = ("call_1", "calculator", '{"expression": "2+3"}')


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def register_tool(pm: PluginManager, name: str,
                  run: Callable[[dict[str, Any], ToolContext], Awaitable[Any]]) -> None:
    """Register a one-tool plugin on ``pm`` (before the gateway starts)."""
    class OneTool:
        @hookimpl
        def register_tools(self, host: Any) -> list[Tool]:
            return [Tool(name=name, description=f"the {name} test tool",
                         parameters={"type": "object", "properties": {}}, run=run)]

    pm.register(OneTool(), name=f"tool-{name}")


def assert_tool_pairs_intact(messages: list[dict[str, Any]]) -> None:
    """OpenAI's rule: an assistant ``tool_calls`` message is followed by exactly its results."""
    index = 0
    while index < len(messages):
        message = messages[index]
        assert message["role"] != "tool", f"tool result without its call at {index}: {message}"
        index += 1
        if message["role"] == "assistant" and message.get("tool_calls"):
            expected = [call["id"] for call in message["tool_calls"]]
            answered = []
            while index < len(messages) and messages[index]["role"] == "tool":
                answered.append(messages[index]["tool_call_id"])
                index += 1
            assert answered == expected, f"call {expected} answered by {answered}"


def assert_every_request_keeps_tool_pairs(fake_llm: FakeLLM) -> None:
    for request in fake_llm.requests:
        assert_tool_pairs_intact(request.messages)


# --- one tool call, end to end ------------------------------------------------------------------
async def test_tool_call_is_run_and_its_result_sent_back_before_the_final_answer(
        start_clocked: StartClocked, fake_llm: FakeLLM) -> None:
    harness = await start_clocked()
    auth = await harness.user()
    fake_llm.script += [Scripted(body=tool_call_completion([CALC_2_PLUS_3])),
                        Scripted(body=completion("The answer is 5."))]

    body = await chat_ok(harness, auth, "what is 2+3?")

    assert body["reply"] == "The answer is 5."
    assert len(fake_llm.requests) == 2
    first, second = fake_llm.requests
    for request in (first, second):
        offered = {t["function"]["name"]: t for t in request.body["tools"]}
        assert {"calculator", "current_time"} <= set(offered)
        assert offered["calculator"]["type"] == "function"
        assert offered["calculator"]["function"]["parameters"]["required"] == ["expression"]
    assert second.messages[:-2] == first.messages
    assert first.messages[-1] == {"role": "user", "content": "what is 2+3?"}
    assert second.messages[-2] == {
        "role": "assistant", "content": None,
        "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "calculator", "arguments": '{"expression": "2+3"}'}}]}
    assert second.messages[-1] == {"role": "tool", "tool_call_id": "call_1",
                                   "content": "2+3 = 5"}
    thread = await (await harness.client.get("/api/threads/t1", headers=auth)).json()
    assert thread["messages"] == [{"role": "user", "content": "what is 2+3?"},
                                  {"role": "assistant", "content": "The answer is 5."}]
    assert sorted(m["role"] for m in thread["display_messages"]) == ["assistant", "user"]


async def test_two_parallel_tool_calls_in_one_round(
        start_clocked: StartClocked, fake_llm: FakeLLM) -> None:
    harness = await start_clocked()
    auth = await harness.user()
    fake_llm.script += [
        Scripted(body=tool_call_completion([
            ("call_a", "calculator", '{"expression": "6*7"}'),
            ("call_b", "current_time", '{"timezone": "Europe/Paris"}')])),
        Scripted(body=completion("42, and it is late in Paris."))]

    body = await chat_ok(harness, auth, "6*7 and the time in Paris?")

    assert body["reply"] == "42, and it is late in Paris."
    assert len(fake_llm.requests) == 2
    call, result_a, result_b = fake_llm.requests[1].messages[-3:]
    assert [c["id"] for c in call["tool_calls"]] == ["call_a", "call_b"]
    assert (result_a["role"], result_a["tool_call_id"], result_a["content"]) == (
        "tool", "call_a", "6*7 = 42")
    assert (result_b["role"], result_b["tool_call_id"]) == ("tool", "call_b")
    assert json.loads(result_b["content"])["timezone"] == "Europe/Paris"


async def test_plugin_tool_receives_the_turns_context(
        start_clocked: StartClocked, fake_llm: FakeLLM, pm: PluginManager) -> None:
    contexts: list[ToolContext] = []

    async def whoami(arguments: dict[str, Any], context: ToolContext) -> str:
        contexts.append(context)
        return f"you are {context.user_id} in {context.thread_id}"

    register_tool(pm, "whoami", whoami)
    harness = await start_clocked()
    auth = await harness.user("bob")
    fake_llm.script += [Scripted(body=tool_call_completion([("c1", "whoami", "{}")])),
                        Scripted(body=completion("done"))]

    await chat_ok(harness, auth, "who am I?", thread="t7")

    assert contexts == [ToolContext(user_id="bob", thread_id="t7", session_key="bob--t7")]
    assert "whoami" in {t["function"]["name"] for t in fake_llm.requests[0].body["tools"]}
    assert fake_llm.requests[1].messages[-1]["content"] == "you are bob in t7"


# --- failing tools ------------------------------------------------------------------------------
async def test_a_raising_tool_gives_the_model_an_error_and_the_turn_answers(
        start_clocked: StartClocked, fake_llm: FakeLLM, pm: PluginManager) -> None:
    async def explodes(arguments: dict[str, Any], context: ToolContext) -> str:
        raise RuntimeError("backend unreachable")

    register_tool(pm, "explodes", explodes)
    harness = await start_clocked()
    auth = await harness.user()
    fake_llm.script += [Scripted(body=tool_call_completion([("c1", "explodes", "{}")])),
                        Scripted(body=completion("Sorry, the tool failed."))]

    body = await chat_ok(harness, auth, "try it")

    assert body["reply"] == "Sorry, the tool failed."
    result = fake_llm.requests[1].messages[-1]
    assert result["tool_call_id"] == "c1"
    assert result["content"].startswith("error: ")
    assert "backend unreachable" in result["content"]


async def test_a_hanging_tool_times_out_into_an_error_and_the_turn_answers(
        start_clocked: StartClocked, fake_llm: FakeLLM, pm: PluginManager) -> None:
    async def hangs(arguments: dict[str, Any], context: ToolContext) -> str:
        await asyncio.Event().wait()  # never set: only the timeout ends this
        return "unreachable"

    register_tool(pm, "hangs", hangs)
    harness = await start_clocked(tool_timeout_seconds=0.2)
    auth = await harness.user()
    fake_llm.script += [Scripted(body=tool_call_completion([("c1", "hangs", "{}")])),
                        Scripted(body=completion("The tool took too long."))]

    body = await chat_ok(harness, auth, "try it")

    assert body["reply"] == "The tool took too long."
    result = fake_llm.requests[1].messages[-1]
    assert result["tool_call_id"] == "c1"
    assert result["content"].startswith("error: ")
    assert "0.2 seconds" in result["content"]


async def test_unknown_tool_and_bad_arguments_become_error_results(
        start_clocked: StartClocked, fake_llm: FakeLLM) -> None:
    harness = await start_clocked()
    auth = await harness.user()
    fake_llm.script += [
        Scripted(body=tool_call_completion([("c1", "no_such_tool", "{}"),
                                            ("c2", "calculator", "{not json")])),
        Scripted(body=completion("I could not do that."))]

    body = await chat_ok(harness, auth, "try it")

    assert body["reply"] == "I could not do that."
    unknown, bad = fake_llm.requests[1].messages[-2:]
    assert unknown["tool_call_id"] == "c1" and unknown["content"].startswith("error: ")
    assert bad["tool_call_id"] == "c2" and bad["content"].startswith("error: ")


# --- the round limit ----------------------------------------------------------------------------
async def test_the_round_limit_stops_the_loop_with_a_clear_reply(
        start_clocked: StartClocked, fake_llm: FakeLLM, pm: PluginManager) -> None:
    runs: list[int] = []

    async def again(arguments: dict[str, Any], context: ToolContext) -> str:
        runs.append(1)
        return f"run {len(runs)}"

    register_tool(pm, "again", again)
    harness = await start_clocked(max_tool_rounds=2)
    auth = await harness.user()
    fake_llm.responder = lambda request: Scripted(body=tool_call_completion(
        [(f"c{len(fake_llm.requests)}", "again", "{}")]))

    body = await chat_ok(harness, auth, "loop forever")

    assert len(fake_llm.requests) == 3
    assert len(runs) == 2
    assert "stopped after 2 rounds" in body["reply"]
    assert_every_request_keeps_tool_pairs(fake_llm)
    events = await session_events(harness.gateway)
    assert [e["type"] for e in events].count("tool_calls") == 2
    assert [e["type"] for e in events].count("tool_result") == 2

    fake_llm.responder = lambda request: Scripted(body=completion("back to normal"))
    assert (await chat_ok(harness, auth, "hello?"))["reply"] == "back to normal"


# --- billing ------------------------------------------------------------------------------------
async def test_every_provider_call_is_a_ledger_row_and_usage_sums_them(
        start_clocked: StartClocked, fake_llm: FakeLLM) -> None:
    harness = await start_clocked()
    auth = await harness.user()
    balance_before = (await harness.gateway.store.get_user("alice")).credits
    fake_llm.script += [
        Scripted(body=tool_call_completion([CALC_2_PLUS_3], prompt_tokens=1000,
                                           completion_tokens=20)),
        Scripted(body=tool_call_completion([("call_2", "calculator", '{"expression": "5*2"}')],
                                           prompt_tokens=1300, completion_tokens=30)),
        Scripted(body=completion("10", prompt_tokens=1600, completion_tokens=40))]

    body = await chat_ok(harness, auth, "2+3, then times 2")

    ledger = await harness.gateway.store.ledger("alice")
    rows = ledger[1:]
    assert [row.kind for row in ledger] == ["grant", "chat", "tool_round", "tool_round"]
    assert [(r.prompt_tokens, r.completion_tokens) for r in rows] == [
        (1000, 20), (1300, 30), (1600, 40)]
    assert body["usage"] == {"promptTokens": 3900, "completionTokens": 90,
                             "credits": sum(r.credits for r in rows)}
    assert (await harness.gateway.store.get_user("alice")).credits == (
        balance_before - sum(r.credits for r in rows))
    usage_event = (await session_events(harness.gateway))[-1]
    assert usage_event["type"] == "usage"
    assert (usage_event["promptTokens"], usage_event["calls"]) == (3900, 3)


async def test_a_failed_call_after_a_tool_round_stores_nothing_but_bills_the_call_that_answered(
        start_clocked: StartClocked, fake_llm: FakeLLM) -> None:
    harness = await start_clocked(llm_max_retries=0)
    auth = await harness.user()
    fake_llm.script += [Scripted(body=tool_call_completion([CALC_2_PLUS_3])),
                        Scripted(status=400, body={"error": {"message": "bad request"}})]

    response = await harness.chat(auth, "what is 2+3?")

    assert response.status == 502
    # SPEC §9: every LLM call that answered is charged; the failed one is not.
    ledger = await harness.gateway.store.ledger("alice")
    assert [row.kind for row in ledger] == ["grant", "chat"]
    user = await harness.gateway.store.get_user("alice")
    assert user is not None and user.credits == -sum(row.credits for row in ledger)
    assert await session_bytes(harness.gateway) is None
    assert (await harness.client.get("/api/threads/t1", headers=auth)).status == 404


# --- continuity ---------------------------------------------------------------------------------
def expected_replay(first_user: str, reply: str) -> list[dict[str, Any]]:
    """Turn one of the continuity tests, as the next turn must show it to the model."""
    return [
        {"role": "user", "content": first_user},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "calculator",
                                      "arguments": '{"expression": "2+3"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "2+3 = 5"},
        {"role": "assistant", "content": reply},
    ]


async def test_the_next_turn_replays_the_tool_exchange_before_its_reply(
        start_clocked: StartClocked, fake_llm: FakeLLM) -> None:
    harness = await start_clocked()
    auth = await harness.user()
    fake_llm.script += [Scripted(body=tool_call_completion([CALC_2_PLUS_3])),
                        Scripted(body=completion("It is 5."))]
    await chat_ok(harness, auth, "what is 2+3?")

    await chat_ok(harness, auth, "and doubled?")

    messages = fake_llm.requests[-1].messages
    assert messages[0]["role"] == "system"
    assert messages[1:] == [*expected_replay("what is 2+3?", "It is 5."),
                            {"role": "user", "content": "and doubled?"}]


async def test_a_multi_round_exchange_is_replayed_in_order(
        start_clocked: StartClocked, fake_llm: FakeLLM) -> None:
    harness = await start_clocked()
    auth = await harness.user()
    fake_llm.script += [
        Scripted(body=tool_call_completion([CALC_2_PLUS_3])),
        Scripted(body=tool_call_completion([("call_2", "calculator", '{"expression": "5*2"}')],
                                           content="Now doubling.")),
        Scripted(body=completion("It is 10."))]
    await chat_ok(harness, auth, "2+3 doubled?")
    turn_one_last_request = fake_llm.requests[-1].messages

    await chat_ok(harness, auth, "thanks")

    messages = fake_llm.requests[-1].messages
    assert messages[1:-1] == [*turn_one_last_request[1:],
                              {"role": "assistant", "content": "It is 10."}]
    assert [m["role"] for m in messages[1:]] == [
        "user", "assistant", "tool", "assistant", "tool", "assistant", "user"]
    assert messages[4]["content"] == "Now doubling."
    assert messages[5] == {"role": "tool", "tool_call_id": "call_2", "content": "5*2 = 10"}


async def test_after_rotation_the_tool_exchange_is_not_replayed(
        start_clocked: StartClocked, fake_llm: FakeLLM, clock: FakeClock) -> None:
    harness = await start_clocked()
    auth = await harness.user()
    fake_llm.script += [Scripted(body=tool_call_completion([CALC_2_PLUS_3])),
                        Scripted(body=completion("It is 5."))]
    await chat_ok(harness, auth, "what is 2+3?")

    clock.advance(harness.gateway.settings.session_idle_minutes * 60 + 5)
    body = await chat_ok(harness, auth, "and doubled?")

    assert body["sessionRotated"] is True
    assert fake_llm.requests[-1].messages[1:] == [
        {"role": "user", "content": "what is 2+3?"},
        {"role": "assistant", "content": "It is 5."},
        {"role": "user", "content": "and doubled?"}]


async def test_after_a_restart_the_exchange_is_rebuilt_from_the_session_file(
        fake_llm: FakeLLM, aiohttp_client: Any, make_settings: Callable[..., Settings],
        pm: PluginManager, clock: FakeClock) -> None:
    settings = make_settings()
    first = await start_with_clock(aiohttp_client, settings, pm, clock)
    auth = await first.user()
    fake_llm.script += [Scripted(body=tool_call_completion([CALC_2_PLUS_3])),
                        Scripted(body=completion("It is 5."))]
    await chat_ok(first, auth, "what is 2+3?")
    await first.client.close()

    second = await start_with_clock(aiohttp_client, settings, pm, clock)
    await chat_ok(second, auth, "and doubled?")

    assert fake_llm.requests[-1].messages[1:] == [
        *expected_replay("what is 2+3?", "It is 5."),
        {"role": "user", "content": "and doubled?"}]


@pytest.mark.sqlite_only  # tears a session file
async def test_replay_survives_a_restart_after_a_torn_write(
        fake_llm: FakeLLM, aiohttp_client: Any, make_settings: Callable[..., Settings],
        pm: PluginManager, clock: FakeClock) -> None:
    settings = make_settings()
    first = await start_with_clock(aiohttp_client, settings, pm, clock)
    auth = await first.user()
    fake_llm.script += [Scripted(body=tool_call_completion([CALC_2_PLUS_3])),
                        Scripted(body=completion("It is 5."))]
    await chat_ok(first, auth, "what is 2+3?")
    await first.client.close()
    with (settings.sessions_dir / "alice--t1.jsonl").open("ab") as handle:
        handle.write(b'{"type":"tool_result","replyId":')

    second = await start_with_clock(aiohttp_client, settings, pm, clock)
    await chat_ok(second, auth, "and doubled?")

    assert fake_llm.requests[-1].messages[1:-1] == expected_replay("what is 2+3?", "It is 5.")


# --- trimming under MAX_CONTEXT -----------------------------------------------------------------
BULK = "data " * 1000  # about 1,000 tokens


def bulky_script(fake_llm: FakeLLM, call_id: str, reply: str) -> None:
    fake_llm.script += [Scripted(body=tool_call_completion([(call_id, "bulky", "{}")])),
                        Scripted(body=completion(reply))]


async def test_trimming_drops_an_old_exchange_with_its_reply_never_half_of_it(
        start_clocked: StartClocked, fake_llm: FakeLLM, pm: PluginManager) -> None:
    async def bulky(arguments: dict[str, Any], context: ToolContext) -> str:
        return BULK

    register_tool(pm, "bulky", bulky)
    # One old exchange fits beside a turn; two do not beside the long third message.
    harness = await start_clocked(max_context=2700)
    auth = await harness.user()
    bulky_script(fake_llm, "old_call", "fetched one")
    await chat_ok(harness, auth, "fetch one")
    bulky_script(fake_llm, "new_call", "fetched two")
    await chat_ok(harness, auth, "fetch two")
    assert "old_call" in json.dumps(fake_llm.requests[-1].messages)  # both fitted so far

    await chat_ok(harness, auth, "ask " * 600)

    messages = fake_llm.requests[-1].messages
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool",
                                             "assistant", "user"]
    assert messages[1]["content"] == "fetch two"
    assert messages[2]["tool_calls"][0]["id"] == "new_call"
    assert messages[3] == {"role": "tool", "tool_call_id": "new_call", "content": BULK}
    assert messages[4]["content"] == "fetched two"
    assert "old_call" not in json.dumps(messages)
    assert "fetched one" not in json.dumps(messages)  # the reply went with its exchange
    assert_every_request_keeps_tool_pairs(fake_llm)
    for request in fake_llm.requests:
        used = harness.gateway.counter.messages(request.messages)
        assert used + harness.gateway.agent.toolbox.schema_tokens <= 2700


async def test_tool_pairs_stay_whole_across_many_trimmed_turns(
        start_clocked: StartClocked, fake_llm: FakeLLM, pm: PluginManager) -> None:
    async def sized(arguments: dict[str, Any], context: ToolContext) -> str:
        return "data " * int(arguments.get("words", 10))

    class Sized:
        @hookimpl
        def register_tools(self, host: Any) -> list[Tool]:
            return [Tool(name="sized", description="returns N words",
                         parameters={"type": "object",
                                     "properties": {"words": {"type": "integer"}}},
                         run=sized)]

    pm.register(Sized(), name="sized")
    harness = await start_clocked(max_context=1500)
    auth = await harness.user()
    for turn in range(8):
        words = 50 + 97 * (turn % 4)
        fake_llm.script += [
            Scripted(body=tool_call_completion(
                [(f"t{turn}_a", "sized", json.dumps({"words": words})),
                 (f"t{turn}_b", "sized", json.dumps({"words": 20}))])),
            Scripted(body=completion(f"reply {turn}"))]
        await chat_ok(harness, auth, f"turn {turn}")

    assert_every_request_keeps_tool_pairs(fake_llm)
    last = fake_llm.requests[-1].messages
    assert "t0_a" not in json.dumps(last)  # trimming did happen
    assert any(m.get("tool_call_id") for m in last[:-2])  # and old exchanges are still sent


async def test_a_turns_tool_results_push_out_old_history_before_giving_up(
        start_clocked: StartClocked, fake_llm: FakeLLM, pm: PluginManager) -> None:
    async def bulky(arguments: dict[str, Any], context: ToolContext) -> str:
        return BULK

    register_tool(pm, "bulky", bulky)
    harness = await start_clocked(max_context=1800)
    auth = await harness.user()
    bulky_script(fake_llm, "old_call", "fetched one")
    await chat_ok(harness, auth, "fetch one")
    bulky_script(fake_llm, "new_call", "fetched two")

    body = await chat_ok(harness, auth, "fetch two")

    # The old exchange can go; the new result and the user's message fit without it.
    assert body["reply"] == "fetched two"
    assert "old_call" not in json.dumps(fake_llm.requests[-1].messages)


# --- credentials --------------------------------------------------------------------------------
async def save_password(harness: Harness, auth: dict[str, str]) -> None:
    response = await harness.client.put(
        "/api/user/browser-credentials", headers=auth,
        json={"site": "example.com", "username": "al", "password": PASSWORD})
    assert response.status == 200, await response.text()


async def test_a_password_in_a_tool_result_never_reaches_the_session_file(
        start_clocked: StartClocked, fake_llm: FakeLLM, pm: PluginManager) -> None:
    async def leaky(arguments: dict[str, Any], context: ToolContext) -> str:
        return f"logged in; the page echoes your password {PASSWORD}"

    register_tool(pm, "leaky", leaky)
    harness = await start_clocked()
    auth = await harness.user()
    await save_password(harness, auth)
    fake_llm.script += [Scripted(body=tool_call_completion([("c1", "leaky", "{}")])),
                        Scripted(body=completion("Logged in."))]

    await chat_ok(harness, auth, f"log in, my password is {PASSWORD}")
    await chat_ok(harness, auth, "thanks")

    stored = await session_bytes(harness.gateway)
    assert stored is not None and PASSWORD.encode() not in stored
    result = next(e for e in await session_events(harness.gateway)
                  if e["type"] == "tool_result")
    assert result["content"].startswith("logged in; the page echoes your password")
    # the replayed result is the redacted one as well
    replayed = [m for m in fake_llm.requests[-1].messages if m["role"] == "tool"]
    assert replayed and PASSWORD not in replayed[0]["content"]


async def test_a_password_in_tool_call_arguments_never_reaches_the_session_file(
        start_clocked: StartClocked, fake_llm: FakeLLM, pm: PluginManager) -> None:
    async def browser_login(arguments: dict[str, Any], context: ToolContext) -> str:
        return "logged in" if arguments.get("password") == PASSWORD else "wrong password"

    register_tool(pm, "browser_login", browser_login)
    harness = await start_clocked()
    auth = await harness.user()
    await save_password(harness, auth)
    arguments = json.dumps({"site": "example.com", "username": "al", "password": PASSWORD})
    fake_llm.script += [
        Scripted(body=tool_call_completion([("c1", "browser_login", arguments)],
                                           content=f"Logging in with {PASSWORD}.")),
        Scripted(body=completion("Logged in."))]

    await chat_ok(harness, auth, "log me in to example.com")

    assert fake_llm.requests[1].messages[-1]["content"] == "logged in"  # the tool got it
    stored = await session_bytes(harness.gateway)
    assert stored is not None and PASSWORD.encode() not in stored
