"""Saved passwords are redacted in every encoding (SPEC §11): raw, JSON-escaped, inside tool-call
arguments and tool results, URL-encoded, base64; and pinned values or specialist instructions
that hold one are refused with 400 ``contains_secret``.

Property tests check :mod:`gateway.secrets` on any password and any JSON structure; the rest go
end to end through the real app, the fake OpenAI-compatible server and the chat commands.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import re
import zipfile
from collections.abc import Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway import Command, PromptSection, TurnContext, hookimpl
from gateway.accounts.secrets import (
    REDACTED,
    Redactor,
    redact,
    redact_chat_message,
    redact_json_text,
    redactor_for,
)
from gateway.plugins.manager import PluginManager
from gateway.testing.fake_llm import FakeLLM, Scripted, completion, tool_call_completion
from gateway.tools import ToolContext
from tests.conftest import Harness
from tests.helpers import assert_json_error
from tests.test_agent_tools import register_tool

StartGateway = Callable[..., Awaitable[Harness]]

UMLAUT_PASSWORD = "Hunter2-Pässwörd"
QUOTED_PASSWORD = 'Hunter2-"quoted"\\back\\slash'
MEMORY = "/api/user/memory"
CREDENTIALS = "/api/user/browser-credentials"


def encodings(password: str) -> set[str]:
    """Every form of ``password`` that must not appear in anything the gateway produces."""
    raw = password.encode("utf-8")
    escaped = json.dumps(password)[1:-1]
    upper_hex = "".join(re.sub(r"\\u([0-9a-f]{4})", lambda m: "\\u" + m[1].upper(),
                               json.dumps(c)[1:-1]) for c in password)
    forms = {
        password,
        escaped,                                            # json.dumps default: \u00e4, \", \\
        upper_hex,                                          # \u00E4
        json.dumps(password, ensure_ascii=False)[1:-1],     # \", \\ only
        escaped.replace("/", "\\/"),                        # \/ as some encoders write it
        json.dumps(json.dumps(password))[1:-1],             # JSON text inside a JSON string
        quote(password), quote(password, safe=""), quote_plus(password),
        repr(password)[1:-1],                               # Python's repr(): \', \xa0, \x7f
        ascii(password)[1:-1],                              # ascii(): \xe4, \u20ac, \U0001f600
        password.encode("unicode_escape").decode("ascii"),  # the unicode_escape codec
        repr(password.encode("utf-8"))[2:-1],               # repr() of the UTF-8 bytes
    }
    for encoded in (base64.b64encode(raw), base64.urlsafe_b64encode(raw)):
        forms |= {encoded.decode("ascii"), encoded.decode("ascii").rstrip("=")}
    return forms


def leaked(password: str, *texts: str) -> list[str]:
    """The forms of ``password`` found in ``texts`` (empty: nothing leaked)."""
    return sorted({form for form in encodings(password) for text in texts if form in text})


def strings_of(value: Any) -> Iterator[str]:
    """Every string in a decoded JSON structure, keys included; JSON strings decoded too."""
    if isinstance(value, str):
        yield value
        try:
            inner = json.loads(value)
        except ValueError:
            return
        if isinstance(inner, dict | list):
            yield from strings_of(inner)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings_of(key)
            yield from strings_of(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_of(item)


def assert_no_form(password: str, value: Any) -> None:
    """Neither ``value`` encoded (both ways) nor any string inside it holds a form of it."""
    texts = [json.dumps(value), json.dumps(value, ensure_ascii=False), *strings_of(value)]
    assert leaked(password, *texts) == [], value


# --- properties ------------------------------------------------------------------------------
UNICODE = st.characters(blacklist_categories=("Cs",))  # any code point but a lone surrogate
TRICKY = st.sampled_from(list('"\'\\/ +%=\n\täöß€😀\u2028\u00a0\u007f\x01'))
passwords = st.text(alphabet=UNICODE | TRICKY, min_size=8, max_size=24).filter(
    lambda p: p not in REDACTED)  # such passwords are refused when saved


@st.composite
def with_password(draw: st.DrawFn) -> tuple[str, Any]:
    """A password and a JSON structure (tool arguments or a tool result) holding it."""
    password = draw(passwords)
    planted = st.tuples(st.text(UNICODE, max_size=4), st.text(UNICODE, max_size=4)).map(
        lambda around: around[0] + password + around[1])
    strings = st.text(UNICODE, max_size=8) | planted
    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | strings
    tree = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(strings, inner, max_size=3), max_leaves=8)
    structure = draw(st.dictionaries(strings, tree, max_size=3))
    structure[draw(strings) + "·"] = draw(planted)  # at least once, also as a value
    return password, structure


PROPERTY = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(case=with_password(), ensure_ascii=st.booleans())
def test_tool_arguments_come_out_valid_json_without_the_password(
        case: tuple[str, Any], ensure_ascii: bool) -> None:
    password, arguments = case
    text = redact_json_text(json.dumps(arguments, ensure_ascii=ensure_ascii), [password])
    assert leaked(password, text) == []
    assert_no_form(password, json.loads(text))


def _exchange(password: str, encoded: str) -> list[dict[str, Any]]:
    """A tool round as the agent keeps it: the model's call and the tool's result."""
    return [
        {"role": "assistant", "content": f"calling with {password}", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "browser", "arguments": encoded}}]},
        {"role": "tool", "tool_call_id": "c1", "content": encoded},
    ]


# Protocol words long enough to be saved; shorter ones are in test_redaction_scaffolding.py.
PROTOCOL_PASSWORDS = st.sampled_from(["tool_cal", "tool_calls", "function", "arguments",
                                      "assistant", "tool_call_id", "tool_result", "toolCallId"])


@st.composite
def tool_round(draw: st.DrawFn) -> tuple[str, list[dict[str, Any]]]:
    """A password, and a tool round as the agent keeps it in which everything that came from
    outside (the model's text, each call's id, name and arguments, each result) is any text,
    JSON or not, that may hold the password in any of its encodings."""
    password = draw(passwords | PROTOCOL_PASSWORDS)
    forms = sorted(encodings(password))
    planted = st.tuples(st.text(UNICODE, max_size=4), st.sampled_from(forms),
                        st.text(UNICODE, max_size=4)).map("".join)
    text = st.text(UNICODE, max_size=8) | planted
    as_json = st.tuples(with_password(), st.booleans()).map(
        lambda drawn: json.dumps(drawn[0][1], ensure_ascii=drawn[1]))
    outside = text | as_json
    count = draw(st.integers(1, 3))
    ids = [f"{index}:{draw(text)}" for index in range(count)]  # distinct, as the model's are
    calls = [{"id": call_id, "type": "function",
              "function": {"name": draw(text), "arguments": draw(outside)}}
             for call_id in ids]
    content = draw(st.none() | text)
    return password, [{"role": "assistant", "content": content, "tool_calls": calls},
                      *({"role": "tool", "tool_call_id": call_id, "content": draw(outside)}
                        for call_id in ids)]


def skeleton(exchange: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A tool round with every value that came from outside blanked: what the gateway wrote."""
    def blank(message: dict[str, Any]) -> dict[str, Any]:
        copy = {key: "" if key in ("content", "tool_call_id") else value
                for key, value in message.items()}
        if "tool_calls" in copy:
            copy["tool_calls"] = [{**call, "id": "", "function": {
                key: "" for key in call["function"]}} for call in copy["tool_calls"]]
        return copy
    return [blank(message) for message in exchange]


def outside_values(exchange: list[dict[str, Any]]) -> list[Any]:
    """Every value of a tool round that came from the model or a tool."""
    values: list[Any] = []
    for message in exchange:
        values += [message[key] for key in ("content", "tool_call_id") if key in message]
        for call in message.get("tool_calls") or ():
            values += [call["id"], call["function"]["name"], call["function"]["arguments"]]
    return values


@PROPERTY
@given(case=tool_round())
def test_a_stored_tool_round_keeps_its_structure_and_holds_no_form_of_the_password(
        case: tuple[str, list[dict[str, Any]]]) -> None:
    # Issue 28: a redactor that also redacted the gateway's keys turned "tool_calls" into
    # "[redacted]s" for the password "tool_cal", and the committed turn then failed.
    password, exchange = case
    redacted = [redact_chat_message(message, [password]) for message in exchange]
    assert skeleton(redacted) == skeleton(exchange)
    for value in outside_values(redacted):
        assert_no_form(password, value)
    for before, after in zip(outside_values(exchange), outside_values(redacted), strict=True):
        if isinstance(before, str) and before[:1] in "[{":
            try:
                json.loads(before)
            except ValueError:
                continue
            json.loads(after)  # JSON from outside stays JSON
    # the results still answer their calls, one for one
    ids = [call["id"] for call in redacted[0]["tool_calls"]]
    assert [m["tool_call_id"] for m in redacted[1:]] == ids


@pytest.mark.parametrize("password", ["tool_cal", "function", "assistant", "arguments",
                                      "tool_call_id"])
def test_a_password_that_is_a_protocol_word_leaves_the_exchange_whole(password: str) -> None:
    # Hypothesis once drew "tool_cal": redacting keys turned "tool_calls" into "[redacted]s"
    # and the committed turn then failed writing its session events.
    arguments = json.dumps({"password": password})
    redacted = [redact_chat_message(m, [password]) for m in _exchange(password, arguments)]
    call = redacted[0]["tool_calls"][0]
    assert call["type"] == "function"
    assert call["function"]["name"] == "browser"
    assert json.loads(call["function"]["arguments"]) == {"password": REDACTED}
    assert redacted[0]["content"] == f"calling with {REDACTED}"
    assert json.loads(redacted[1]["content"]) == {"password": REDACTED}


@PROPERTY
@given(case=with_password(), ensure_ascii=st.booleans())
def test_a_json_tool_result_redacted_as_text_holds_no_form_of_the_password(
        case: tuple[str, Any], ensure_ascii: bool) -> None:
    password, result = case
    assert leaked(password, redact(json.dumps(result, ensure_ascii=ensure_ascii),
                                   [password])) == []


@PROPERTY
@given(password=passwords, parts=st.lists(st.text(UNICODE, max_size=6), min_size=2,
                                          max_size=6), data=st.data())
def test_text_holding_any_encoding_of_the_password_comes_out_clean(
        password: str, parts: list[str], data: st.DataObject) -> None:
    forms = sorted(encodings(password))
    chosen = [data.draw(st.sampled_from(forms)) for _ in parts[1:]]
    text = parts[0] + "".join(form + part for form, part in zip(chosen, parts[1:], strict=True))
    assert leaked(password, redact(text, [password])) == []


@PROPERTY
@given(password=passwords, prefix=st.binary(max_size=5), suffix=st.binary(max_size=5))
def test_base64_of_the_password_at_any_offset_is_redacted(
        password: str, prefix: bytes, suffix: bytes) -> None:
    blob = prefix + password.encode("utf-8") + suffix
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        text = encode(blob).decode("ascii")
        out = redact(text, [password])
        assert out != text
        assert leaked(password, out) == []


# --- examples --------------------------------------------------------------------------------
def test_the_issue_example_arguments_keep_their_shape_and_other_text_is_untouched() -> None:
    arguments = json.dumps({"timezone": UMLAUT_PASSWORD, "other": ["x", UMLAUT_PASSWORD]})
    assert "\\u00e4" in arguments
    assert json.loads(redact_json_text(arguments, [UMLAUT_PASSWORD])) == {
        "timezone": REDACTED, "other": ["x", REDACTED]}
    # without the password, text and JSON formatting stay exactly as they were
    clean = '{"timezone":"Europe/Berlin",  "note": "P\\u00e4ssw\\u00f6rd"}'
    assert redact_json_text(clean, [UMLAUT_PASSWORD]) == clean
    assert redact("Hunter2-Passwort, almost", [UMLAUT_PASSWORD]) == "Hunter2-Passwort, almost"


def test_a_json_tool_result_stays_valid_json() -> None:
    result = json.dumps({"ok": True, "echo": f"tz={QUOTED_PASSWORD}"})
    assert json.loads(redact(result, [QUOTED_PASSWORD])) == {"ok": True, "echo": "tz=" + REDACTED}


def test_a_password_spanning_two_json_strings_gives_up_the_value_not_the_json() -> None:
    password = 'user", "pass'
    arguments = json.dumps(["user", "pass"])
    assert json.loads(redact_json_text(arguments, [password])) == REDACTED


# Issue 28: a quote, a no-break space, DEL; repr() writes them \', \xa0, \x7f.
ESCAPED_BY_REPR = ["Pa'ss\"w0rd!", "correct\u00a0horse9", "plainpass\u007f1", "Pässwörd-€😀"]


@pytest.mark.parametrize("password", ESCAPED_BY_REPR)
def test_python_escaped_spellings_of_the_password_are_redacted(password: str) -> None:
    spellings = [repr(password), ascii(password), str(password.encode("utf-8")),
                 password.encode("unicode_escape").decode("ascii"),
                 password.encode("utf-8").decode("ascii", "backslashreplace"),
                 repr({"zone": password}), repr(repr(password))]
    for spelling in spellings:
        out = redact(f"unknown time zone {spelling}; try again", [password])
        assert leaked(password, out) == [], (spelling, out)
        assert out.startswith("unknown time zone ") and out.endswith("; try again")


def test_the_redactor_is_built_once_per_set_of_secrets() -> None:
    first = redactor_for(["abcdefgh", "ijklmnop"])
    assert redactor_for(("ijklmnop", "abcdefgh", "")) is first
    assert isinstance(first, Redactor)
    assert first.contains(base64.b64encode(b"ijklmnop").decode("ascii"))


# --- end to end: a tool called with the password ---------------------------------------------
async def save_password(harness: Harness, auth: dict[str, str], password: str) -> None:
    response = await harness.client.put(CREDENTIALS, headers=auth, json={
        "site": "example.com", "username": "ada", "password": password})
    assert response.status == 200, await response.text()


async def session_texts(gateway: Any) -> list[str]:
    """Every active session's JSONL, wherever sessions are kept (these turns never rotate)."""
    sessions = gateway.sessions
    texts = [(await sessions.export(active.key) or b"").decode("utf-8")
             for active in await sessions.active_sessions()]
    assert texts
    return texts


@pytest.mark.parametrize(("password", "ensure_ascii"), [
    (UMLAUT_PASSWORD, True), (UMLAUT_PASSWORD, False), (QUOTED_PASSWORD, True),
    (QUOTED_PASSWORD, False)])
async def test_a_tool_called_with_the_password_leaks_it_nowhere(
        start_gateway: Any, fake_llm: FakeLLM, pm: PluginManager,
        password: str, ensure_ascii: bool) -> None:
    seen: list[str] = []

    async def set_timezone(arguments: dict[str, Any], context: ToolContext) -> Any:
        seen.append(arguments["timezone"])
        return {"ok": False, "error": "unknown timezone", "timezone": arguments["timezone"]}

    register_tool(pm, "set_timezone", set_timezone)
    harness = await start_gateway()
    auth = await harness.user()
    await save_password(harness, auth, password)
    arguments = json.dumps({"timezone": password}, ensure_ascii=ensure_ascii)
    quoted = json.dumps({"timezone": password})
    fake_llm.script += [
        Scripted(body=tool_call_completion([("c1", "set_timezone", arguments)])),
        Scripted(body=completion(f"The tool said {quoted}; URL {quote(password)}."))]

    first = await harness.chat(auth, "set my timezone")
    assert first.status == 200, await first.text()
    reply = await first.text()
    second = await harness.chat(auth, "thanks")  # replays the stored tool exchange
    assert second.status == 200, await second.text()

    assert seen == [password]  # the tool itself got the real password
    assert leaked(password, reply) == []
    assert json.loads(reply)["reply"].startswith("The tool said")
    for text in await session_texts(harness.gateway):
        assert leaked(password, text) == []
        for line in text.splitlines():
            assert_no_form(password, json.loads(line))
    texts = await session_texts(harness.gateway)
    events = [json.loads(line) for text in texts for line in text.splitlines()]
    calls = [c for e in events if e.get("type") == "tool_calls" for c in e["calls"]]
    assert [json.loads(c["arguments"]) for c in calls] == [{"timezone": REDACTED}]
    results = [e["content"] for e in events if e.get("type") == "tool_result"]
    assert [json.loads(r)["timezone"] for r in results] == [REDACTED]
    thread = await harness.client.get("/api/threads/t1", headers=auth)
    body = await thread.json()
    assert len(body["messages"]) == 4 and len(body["display_messages"]) == 4
    assert leaked(password, await thread.text()) == []
    assert_no_form(password, body)
    # replayed to the model from the session (the system prompt holds the login on purpose)
    replayed = [m for m in fake_llm.chat_requests[-1].messages if m["role"] != "system"]
    assert any(m.get("tool_calls") for m in replayed)
    assert_no_form(password, replayed)


@pytest.mark.parametrize("password", ESCAPED_BY_REPR)
async def test_the_current_time_tool_given_the_password_as_a_zone_stores_no_form_of_it(
        harness: Harness, fake_llm: FakeLLM, password: str) -> None:
    auth = await harness.user()
    await save_password(harness, auth, password)
    fake_llm.script += [
        Scripted(body=tool_call_completion(
            [("c1", "current_time", json.dumps({"timezone": password}))])),
        Scripted(body=completion("That is not a time zone."))]

    response = await harness.chat(auth, "what time is it in my password?")
    assert response.status == 200, await response.text()

    # what the model read back: the tool's answer, redacted
    answered = fake_llm.chat_requests[-1].messages[-1]
    assert answered["role"] == "tool"
    assert json.loads(answered["content"]) == {
        "error": f'unknown time zone "{REDACTED}"; use an IANA name like Europe/Paris'}
    for text in await session_texts(harness.gateway):
        assert leaked(password, text) == []
        for line in text.splitlines():
            assert_no_form(password, json.loads(line))


@pytest.mark.parametrize("password", ["function", "assistant", "tool_calls"])
async def test_a_password_that_is_a_protocol_word_still_lets_tool_turns_complete(
        start_gateway: Any, fake_llm: FakeLLM, pm: PluginManager,
        password: str) -> None:
    async def echo(arguments: dict[str, Any], context: ToolContext) -> Any:
        return {"echo": arguments["text"]}

    register_tool(pm, "echo", echo)
    harness = await start_gateway()
    auth = await harness.user()
    await save_password(harness, auth, password)
    fake_llm.script += [
        Scripted(body=tool_call_completion([("c1", "echo", json.dumps({"text": password}))])),
        Scripted(body=completion("Echoed."))]

    first = await harness.chat(auth, "echo my password")
    assert first.status == 200, await first.text()
    second = await harness.chat(auth, "and now?")  # replays the stored tool exchange
    assert second.status == 200, await second.text()

    texts = await session_texts(harness.gateway)
    events = [json.loads(line) for text in texts for line in text.splitlines()]
    calls = [c for e in events if e.get("type") == "tool_calls" for c in e["calls"]]
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [
        ("echo", {"text": REDACTED})]
    results = [json.loads(e["content"]) for e in events if e.get("type") == "tool_result"]
    assert results == [{"echo": REDACTED}]
    replayed = [m for m in fake_llm.chat_requests[-1].messages if m["role"] != "system"]
    assert [m["role"] for m in replayed] == ["user", "assistant", "tool", "assistant", "user"]


# --- 400 contains_secret -------------------------------------------------------------------------
def stored_forms(password: str) -> list[str]:
    """A value holding the password raw, JSON-escaped, URL-encoded and in base64."""
    return [f"wifi is {password}", json.dumps({"wifi": password}), f"?p={quote_plus(password)}",
            "b64:" + base64.b64encode(b"pw=" + password.encode("utf-8")).decode("ascii")]


@pytest.mark.parametrize("form", range(4))
@pytest.mark.parametrize("password", [UMLAUT_PASSWORD, QUOTED_PASSWORD])
async def test_a_pinned_value_holding_a_saved_password_is_refused(
        harness: Harness, password: str, form: int) -> None:
    auth = await harness.user()
    await save_password(harness, auth, password)
    response = await harness.client.put(MEMORY, params={"threadId": "t1"}, headers=auth,
                                        json={"key": "wifi", "value": stored_forms(password)[form]})
    error = await assert_json_error(response, 400, "contains_secret")
    assert leaked(password, error["message"]) == []
    ok = await harness.client.put(MEMORY, params={"threadId": "t1"}, headers=auth,
                                  json={"key": "tz", "value": "Europe/Berlin"})
    assert (await ok.json())["memory"] == {"tz": "Europe/Berlin"}
    # only the caller's own saved passwords count
    bob = await harness.user("bob")
    theirs = await harness.client.put(MEMORY, params={"threadId": "t1"}, headers=bob,
                                      json={"key": "wifi", "value": stored_forms(password)[form]})
    assert theirs.status == 200, await theirs.text()


@pytest.mark.parametrize("form", range(4))
async def test_specialist_instructions_holding_a_saved_password_are_refused(
        harness: Harness, form: int) -> None:
    auth = await harness.user()
    await save_password(harness, auth, QUOTED_PASSWORD)
    response = await harness.client.put(
        "/api/specialists/login", headers=auth,
        json={"instructions": "Log in with " + stored_forms(QUOTED_PASSWORD)[form]})
    await assert_json_error(response, 400, "contains_secret")
    await assert_json_error(await harness.client.get("/api/specialists/login", headers=auth),
                            404, "specialist_not_found")
    ok = await harness.client.put("/api/specialists/login", headers=auth,
                                  json={"instructions": "Log in with the saved login."})
    assert ok.status == 200, await ok.text()


async def test_remember_refuses_a_value_holding_a_saved_password(harness: Harness) -> None:
    auth = await harness.user()
    await save_password(harness, auth, UMLAUT_PASSWORD)
    gateway = harness.gateway
    user = await gateway.store.get_user("alice")
    assert user is not None
    ref = await gateway.resolve_thread("alice", "t1")
    escaped = json.dumps(UMLAUT_PASSWORD)[1:-1]

    refusal = await gateway.run_command(Command("remember", f"wifi {escaped}"), user, ref)
    assert refusal.startswith("I can't pin that: value contains one of your saved passwords")
    assert leaked(UMLAUT_PASSWORD, refusal) == []
    assert await gateway.run_command(Command("remember", "tz Europe/Berlin"), user, ref) \
        == "Pinned tz."
    memory = await harness.client.get(MEMORY, params={"threadId": "t1"}, headers=auth)
    assert (await memory.json())["memory"] == {"tz": "Europe/Berlin"}


async def test_a_password_inside_the_redaction_marker_is_refused(harness: Harness) -> None:
    auth = await harness.user()
    response = await harness.client.put(CREDENTIALS, headers=auth, json={
        "site": "example.com", "username": "ada", "password": "redacted"})
    await assert_json_error(response, 400, "invalid_password")


async def test_a_short_password_is_refused_so_redaction_cannot_shred_text(
        harness: Harness) -> None:
    auth = await harness.user()
    response = await harness.client.put("/api/user/browser-credentials", headers=auth, json={
        "site": "example.com", "username": "ada", "password": "e"})
    await assert_json_error(response, 400, "invalid_password")
    assert (await harness.chat(auth, "hello there")).status == 200
    thread = await (await harness.client.get("/api/threads/t1", headers=auth)).json()
    assert thread["messages"][0]["content"] == "hello there"


async def test_plugins_see_the_message_with_saved_passwords_redacted(
        start_gateway: StartGateway, pm: PluginManager) -> None:
    seen: list[str] = []

    class Watcher:
        @hookimpl
        def prompt_sections(self, turn: TurnContext) -> list[PromptSection]:
            seen.append(turn.message)
            return []

    pm.register(Watcher(), name="watcher")
    harness = await start_gateway()
    auth = await harness.user()
    await harness.client.put("/api/user/browser-credentials", headers=auth, json={
        "site": "example.com", "username": "ada", "password": "correct-horse-9"})
    assert (await harness.chat(auth, "my password is correct-horse-9")).status == 200
    assert seen == ["my password is [redacted]"]


# --- what the provider says: the ledger and the logs ------------------------------------------
async def test_a_provider_echoing_the_password_leaves_it_in_no_ledger_usage_export_or_log(
        start_gateway: Any, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture) -> None:
    password = QUOTED_PASSWORD
    caplog.set_level(logging.DEBUG)
    harness = await start_gateway(llm_max_retries=0)
    auth = await harness.user()
    await save_password(harness, auth, password)
    fake_llm.script += [
        Scripted(body=completion("hi", model=password)),
        Scripted(status=500, body={"error": {"message": f"no model named {password}"}})]

    assert (await harness.chat(auth, "hello")).status == 200
    assert (await harness.chat(auth, "again")).status == 502

    configured = harness.gateway.settings.llm_model
    [row] = [row for row in await harness.gateway.store.ledger("alice") if row.kind == "chat"]
    assert row.model == configured  # the configured model's name, not the provider's word
    usage = await harness.client.get("/api/user/usage", headers=auth)
    assert leaked(password, await usage.text()) == []
    export = await harness.client.get("/api/user/export", headers=auth)
    archive = zipfile.ZipFile(io.BytesIO(await export.read()))
    for name in archive.namelist():
        assert leaked(password, archive.read(name).decode("utf-8", "replace")) == [], name
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "no model named" in logged  # the provider's words are logged...
    assert leaked(password, logged) == []  # ...without the password, in any encoding
