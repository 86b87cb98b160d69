"""The ``browser`` tool end to end: the fake LLM scripts tool calls, the gateway drives Debian's
Chromium through Playwright, and the pages are a small website on loopback
(:mod:`tests.fakes.website`): a login form that sets a cookie, an account page, a table.

What the tests hold the browser to: the page gets the saved login and the model never does
(vault mode); minutes are charged per started minute and refused when none are left; a context
belongs to one session and goes with its rotation, clear, delete or idle time; pages never reach
loopback or private addresses unless allowed, checked on every connection Chromium makes;
nothing secret reaches transcripts, sessions or logs.
"""

from __future__ import annotations

import base64
import json
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gateway.testing.fake_llm import FakeLLM, Scripted, completion, tool_call_completion
from plugins.browser import pool_of
from plugins.browser.pool import BrowserPool
from tests.conftest import Harness
from tests.fakes.website import PASSWORD, TABLE_ROWS, USERNAME, Website
from tests.helpers import Clock, require_chromium, session_bytes

require_chromium()

Start = Callable[..., Awaitable[Harness]]
ALLOWED = {"browser_enabled": True, "browser_allow_private": True, "max_tool_rounds": 8}


def browse(*steps: dict[str, Any], reply: str = "Done.") -> list[Scripted]:
    """The fake model's answers: one browser call per step, then ``reply``."""
    return [*(Scripted(body=tool_call_completion([(f"call_{n}", "browser", json.dumps(step))]))
              for n, step in enumerate(steps)), Scripted(body=completion(reply))]


def tool_results(fake_llm: FakeLLM) -> list[str]:
    """The tool results of the latest turn, in order (its last request holds them all, after
    the turn's user message, the text one; earlier turns' exchanges come before it)."""
    messages = fake_llm.chat_requests[-1].messages
    start = max(i for i, m in enumerate(messages)
                if m["role"] == "user" and isinstance(m["content"], str))
    return [m["content"] for m in messages[start:] if m["role"] == "tool"]


def pool(harness: Harness) -> BrowserPool:
    found = pool_of(harness.gateway.host_for("browser"))
    assert found is not None, "the browser tool is not loaded"
    return found


async def save_login(harness: Harness, auth: dict[str, str], site: str) -> None:
    response = await harness.client.put("/api/user/browser-credentials", headers=auth, json={
        "site": site, "username": USERNAME, "password": PASSWORD})
    assert response.status == 200, await response.text()


async def chat(harness: Harness, auth: dict[str, str], text: str,
               thread: str = "t1") -> dict[str, Any]:
    response = await harness.chat(auth, text, thread=thread)
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def minutes_left(harness: Harness, auth: dict[str, str]) -> int:
    response = await harness.client.get("/api/user/credits", headers=auth)
    assert response.status == 200
    return int((await response.json())["browserMinutes"])


# --- signing in with a saved login, in vault mode -------------------------------------------
async def test_vault_mode_signs_in_with_the_saved_login_the_model_never_sees(
        start_clocked: Start, fake_llm: FakeLLM, website: Website,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    harness = await start_clocked(browser_vault=True, **ALLOWED)
    auth = await harness.user()
    await save_login(harness, auth, website.site)
    fake_llm.script += browse(
        {"action": "open", "url": f"{website.base}/login"},
        {"action": "fill_credential", "site": website.site},
        {"action": "submit"},
        {"action": "read"},
        {"action": "screenshot"},
        reply="You are signed in; the balance is 42.00 EUR.")

    body = await chat(harness, auth, "check my bank balance")

    assert body["reply"] == "You are signed in; the balance is 42.00 EUR."
    assert website.logins == [(USERNAME, PASSWORD)]  # the page saw the saved login
    opened, filled, submitted, read, shot = (json.loads(r) if r.startswith("{") else r
                                             for r in tool_results(fake_llm))
    assert opened["title"] == "Sign in" and opened["status"] == 200
    assert filled.startswith(f"filled the saved username and password for {website.site}")
    assert submitted["navigated"] and submitted["url"] == f"{website.base}/account"
    assert "Welcome back, Alice" in read["text"] and "Balance: 42.00 EUR" in read["text"]
    # the page echoed the password in its text and title: the model read neither
    assert "Your password is [redacted]" in read["text"]
    assert shot["title"] == "Account ([redacted])" and shot["bytes"] > 1000
    assert pool(harness).get("alice--t1").screenshot.startswith(b"\x89PNG")
    # the model never saw the username or password: not in any prompt, any tool result
    sent = json.dumps([request.body for request in fake_llm.requests])
    assert PASSWORD not in sent and USERNAME not in sent
    system = fake_llm.chat_requests[0].messages[0]["content"]
    assert f"- {website.site}" in system and "fill_credential" in system
    # nothing secret in what is stored: transcript, rolling memory, session file, logs
    thread = await (await harness.client.get("/api/threads/t1", headers=auth)).text()
    session = (await session_bytes(harness.gateway) or b"").decode()
    assert "Welcome back" in session  # the tool results are kept for the session...
    for stored in (thread, session, caplog.text):
        assert PASSWORD not in stored  # ...without the password
    assert await minutes_left(harness, auth) == 29  # one started minute of 30


async def test_without_vault_the_prompt_holds_the_login_and_fill_credential_still_works(
        start_gateway: Start, fake_llm: FakeLLM, website: Website) -> None:
    harness = await start_gateway(**ALLOWED)
    auth = await harness.user()
    await save_login(harness, auth, website.site)
    fake_llm.script += browse({"action": "open", "url": f"{website.base}/login"},
                              {"action": "fill_credential", "site": website.site},
                              {"action": "submit"})

    await chat(harness, auth, "sign in")

    system = fake_llm.chat_requests[0].messages[0]["content"]
    assert f"{website.site}: username {USERNAME}, password {PASSWORD}" in system
    assert website.logins == [(USERNAME, PASSWORD)]


async def test_a_saved_login_is_filled_only_into_its_own_site(
        start_gateway: Start, fake_llm: FakeLLM, website: Website) -> None:
    harness = await start_gateway(browser_vault=True, **ALLOWED)
    auth = await harness.user()
    await save_login(harness, auth, "bank.example.com")
    fake_llm.script += browse({"action": "open", "url": f"{website.base}/login"},
                              {"action": "fill_credential", "site": "bank.example.com"},
                              {"action": "fill_credential", "site": website.site},
                              {"action": "submit"})

    await chat(harness, auth, "sign in to my bank")

    _, elsewhere, unsaved, _ = tool_results(fake_llm)
    assert elsewhere.startswith(f"error: the page is on {website.site}, not bank.example.com")
    assert unsaved == f"error: there is no saved login for {website.site}"
    assert website.logins == [("", "")]  # the form was sent empty: no password went in


# --- reading and clicking ---------------------------------------------------------------------
async def test_read_returns_a_table_as_rows_and_the_next_turn_knows_the_page(
        start_gateway: Start, fake_llm: FakeLLM, website: Website) -> None:
    harness = await start_gateway(**ALLOWED)
    auth = await harness.user()
    fake_llm.script += browse({"action": "open", "url": f"{website.base}/table"},
                              {"action": "read"}, reply="Paris is the largest.")
    await chat(harness, auth, "which city is largest?")
    _, read = tool_results(fake_llm)
    text = json.loads(read)["text"]
    for city, people in TABLE_ROWS:
        assert f"{city}\t{people}" in text

    fake_llm.script.append(Scripted(body=completion("It was the cities table.")))
    await chat(harness, auth, "what page are you on?")
    system = fake_llm.chat_requests[-1].messages[0]["content"]
    assert f"The browser's current page: Cities — {website.base}/table" in system


async def test_a_vision_model_sees_the_screenshot_unless_a_saved_login_was_filled_in(
        start_gateway: Start, fake_llm: FakeLLM, website: Website) -> None:
    harness = await start_gateway(llm_vision=True, **ALLOWED)
    auth = await harness.user()
    fake_llm.script += browse({"action": "open", "url": f"{website.base}/table"},
                              {"action": "screenshot"}, reply="A table of cities.")
    await chat(harness, auth, "what does the page look like?")
    shown = fake_llm.chat_requests[-1].messages[-1]
    assert shown["role"] == "user"
    url = shown["content"][-1]["image_url"]["url"]
    assert base64.b64decode(url.removeprefix("data:image/png;base64,")).startswith(b"\x89PNG")
    assert tool_results(fake_llm)[-1].endswith("[1 picture: shown in the next message]")

    await save_login(harness, auth, website.site)
    fake_llm.script += browse({"action": "open", "url": f"{website.base}/login"},
                              {"action": "fill_credential", "site": website.site},
                              {"action": "screenshot"}, reply="Signed in.")
    await chat(harness, auth, "sign in and show me")
    shot = json.loads(tool_results(fake_llm)[-1])
    assert shot["picture"] == "not shown: a saved login was filled in on this page"
    assert all(m["role"] != "user" or isinstance(m["content"], str)
               for m in fake_llm.chat_requests[-1].messages)


async def test_click_fill_and_bad_calls_answer_the_model_without_failing_the_turn(
        start_gateway: Start, fake_llm: FakeLLM, website: Website) -> None:
    harness = await start_gateway(**ALLOWED)
    auth = await harness.user()
    fake_llm.script += browse(
        {"action": "read"},  # nothing open yet
        {"action": "open", "url": f"{website.base}/login"},
        {"action": "fill", "target": "Email", "value": "bob@example.com"},
        {"action": "fill", "target": "input[name=pass]", "value": "wrong-password"},
        {"action": "click", "target": "Sign in"},
        {"action": "click", "target": "No such button"},
        {"action": "dance"})

    body = await chat(harness, auth, "try to sign in")

    assert body["reply"] == "Done."
    results = tool_results(fake_llm)
    assert results[0] == "error: no page is open in this conversation; use action open first"
    assert json.loads(results[4])["title"] == "Wrong password"
    assert results[5].startswith('error: nothing on the page matches "No such button"')
    assert results[6].startswith("error: 'action' must be one of open, read")
    assert website.logins == [("bob@example.com", "wrong-password")]


async def test_a_link_opening_a_new_tab_is_followed_and_a_closed_page_starts_afresh(
        start_gateway: Start, fake_llm: FakeLLM, website: Website) -> None:
    harness = await start_gateway(**ALLOWED)
    auth = await harness.user()
    fake_llm.script += browse({"action": "open", "url": f"{website.base}/table"},
                              {"action": "click", "target": "Sign in"},
                              {"action": "read"},
                              {"action": "click", "target": "Close"})
    await chat(harness, auth, "follow the link")
    _, clicked, read, _ = tool_results(fake_llm)
    assert json.loads(clicked)["title"] == "Sign in"  # the new tab
    assert "Sign in to Example Bank" in json.loads(read)["text"]

    fake_llm.script += browse({"action": "open", "url": f"{website.base}/table"},
                              {"action": "click", "target": "Close"},  # window.close()
                              {"action": "read"},
                              {"action": "open", "url": f"{website.base}/table"})
    await chat(harness, auth, "close it")
    _, _, read, reopened = tool_results(fake_llm)
    assert read == "error: no page is open in this conversation; use action open first"
    assert json.loads(reopened)["title"] == "Cities"  # ...and the next open starts afresh


# --- SSRF ---------------------------------------------------------------------------------------
async def test_loopback_pages_are_refused_by_default(
        start_gateway: Start, fake_llm: FakeLLM, website: Website) -> None:
    harness = await start_gateway(browser_enabled=True)
    auth = await harness.user()
    fake_llm.script += browse({"action": "open", "url": f"{website.base}/login"},
                              {"action": "open", "url": "http://169.254.169.254/latest/"},
                              {"action": "open", "url": "file:///etc/passwd"},
                              {"action": "open", "url": "http://[64:ff9b::a9fe:a9fe]/latest/"},
                              {"action": "open", "url": "http://192.0.0.192/"})

    await chat(harness, auth, "open the local page")

    local, metadata, file, nat64, protocol = tool_results(fake_llm)
    assert nat64.startswith("error: refused: 64:ff9b::a9fe:a9fe is 64:ff9b::a9fe:a9fe, the "
                            "NAT64 form of 169.254.169.254, link-local")
    assert protocol.startswith("error: refused: 192.0.0.192 is 192.0.0.192, IETF protocol")
    assert local.startswith("error: refused: 127.0.0.1 is 127.0.0.1, loopback (127.0.0.0/8)")
    assert metadata.startswith("error: refused: 169.254.169.254")
    assert file.startswith("error: url must be an http:// or https:// URL")
    assert website.hits == []
    assert pool(harness).stats()["contexts"] == 0  # checked before any context opened:
    assert await minutes_left(harness, auth) == 30  # a refused page costs nothing


async def test_every_connection_chromium_makes_is_checked_again_dns_rebinding_included(
        start_gateway: Start, fake_llm: FakeLLM, website: Website) -> None:
    harness = await start_gateway(browser_enabled=True)
    auth = await harness.user()
    answers = iter(["93.184.216.34", "127.0.0.1"])  # public when checked, loopback after
    others: list[str] = []

    async def rebinding(host: str, port: int) -> list[str]:
        if host != "rebind.test":
            others.append(host)
            raise OSError("unknown host")
        return [next(answers, "127.0.0.1")]

    pool(harness).proxy.resolve = rebinding
    fake_llm.script += browse({"action": "open", "url": f"http://rebind.test:{website.port}/login"},
                              {"action": "read"})

    await chat(harness, auth, "open it")

    _, read = tool_results(fake_llm)
    assert "refused by the gateway: rebind.test is 127.0.0.1" in json.loads(read)["text"]
    assert website.hits == [] and pool(harness).proxy.refused >= 1


async def test_with_private_addresses_allowed_chromium_still_goes_through_the_proxy(
        start_gateway: Start, fake_llm: FakeLLM, website: Website) -> None:
    harness = await start_gateway(**ALLOWED)
    auth = await harness.user()
    resolved: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        resolved.append(host)
        return ["127.0.0.1"]

    pool(harness).proxy.resolve = resolver
    fake_llm.script += browse({"action": "open", "url": f"http://shop.test:{website.port}/table"})
    await chat(harness, auth, "open the shop")
    assert website.hits == ["/table"] and "shop.test" in resolved


# --- minutes ----------------------------------------------------------------------------------
async def test_minutes_are_charged_as_each_starts_and_the_idle_context_closes(
        start_clocked: Start, clock: Clock, fake_llm: FakeLLM, website: Website) -> None:
    harness = await start_clocked(**ALLOWED)
    auth = await harness.user()
    fake_llm.script += browse({"action": "open", "url": f"{website.base}/table"})
    await chat(harness, auth, "open the table")
    browsers = pool(harness)
    assert await minutes_left(harness, auth) == 29  # the first minute, at once

    clock.advance(59)
    await browsers.tick()
    assert await minutes_left(harness, auth) == 29
    clock.advance(2)  # 61 s: the second minute began
    await browsers.tick()
    assert await minutes_left(harness, auth) == 28
    clock.advance(4 * 60)  # 5 minutes 1 s since the last use: idle since 5 minutes
    await browsers.tick()
    assert browsers.get("alice--t1") is None
    # open for 5 minutes until its idle time was up: the minutes the reaper did not see
    # begin (it was told late) are charged as it closes, the sixth, which never began, not
    assert await minutes_left(harness, auth) == 25
    ledger = await harness.gateway.store.ledger("alice")
    assert sum(row.minutes for row in ledger if row.kind == "browser") == 5
    usage = await (await harness.client.get("/api/user/usage", headers=auth)).json()
    assert json.dumps(usage).count('"browser"') >= 1


async def test_with_no_minutes_left_the_tool_says_so_and_the_turn_goes_on(
        start_clocked: Start, clock: Clock, fake_llm: FakeLLM, website: Website) -> None:
    harness = await start_clocked(**ALLOWED)
    auth = await harness.user()
    store = harness.gateway.store
    assert await store.take_minutes("alice", None, 29) == 29  # one left
    fake_llm.script += browse({"action": "open", "url": f"{website.base}/table"},
                              reply="Opened.")
    await chat(harness, auth, "open the table")
    assert await minutes_left(harness, auth) == 0

    clock.advance(61)  # the second minute cannot be paid
    fake_llm.script += browse({"action": "read"}, {"action": "open", "url": website.base},
                              reply="I have no browser minutes left.")
    body = await chat(harness, auth, "read it")

    assert body["reply"] == "I have no browser minutes left."
    assert tool_results(fake_llm) == ["no browser minutes left", "no browser minutes left"]
    assert pool(harness).get("alice--t1") is None
    assert await minutes_left(harness, auth) == 0  # never below zero


# --- one context per session, and its end ---------------------------------------------------------
async def test_each_session_has_its_own_cookies_and_clear_and_delete_close_its_context(
        start_gateway: Start, fake_llm: FakeLLM, website: Website) -> None:
    harness = await start_gateway(browser_vault=True, **ALLOWED)
    auth = await harness.user()
    await save_login(harness, auth, website.site)
    fake_llm.script += browse({"action": "open", "url": f"{website.base}/login"},
                              {"action": "fill_credential", "site": website.site},
                              {"action": "submit"})
    await chat(harness, auth, "sign in", thread="t1")
    fake_llm.script += browse({"action": "open", "url": f"{website.base}/account"})
    await chat(harness, auth, "show my account", thread="t2")
    assert json.loads(tool_results(fake_llm)[0])["title"] == "Sign in"  # t2 has no cookie
    browsers = pool(harness)
    assert browsers.stats()["contexts"] == 2

    response = await harness.client.post("/api/threads/t1/clear", headers=auth)
    assert response.status in (200, 204)
    assert browsers.get("alice--t1") is None and browsers.get("alice--t2") is not None
    response = await harness.client.delete("/api/threads/t2", headers=auth)
    assert response.status in (200, 204)
    assert browsers.stats()["contexts"] == 0

    fake_llm.script += browse({"action": "open", "url": f"{website.base}/account"})
    await chat(harness, auth, "show my account again", thread="t1")
    assert json.loads(tool_results(fake_llm)[0])["title"] == "Sign in"  # the cookie went too


async def test_a_session_rotated_for_idleness_takes_its_context_along(
        start_clocked: Start, clock: Clock, fake_llm: FakeLLM, website: Website) -> None:
    harness = await start_clocked(**ALLOWED)
    auth = await harness.user()
    fake_llm.script += browse({"action": "open", "url": f"{website.base}/table"})
    await chat(harness, auth, "open the table")
    assert pool(harness).get("alice--t1") is not None

    clock.advance(31 * 60)  # past SESSION_IDLE_MINUTES, and no reaper ran meanwhile
    fake_llm.script.append(Scripted(body=completion("Hello again.")))
    body = await chat(harness, auth, "hello again")

    assert body["sessionRotated"] is True
    assert pool(harness).get("alice--t1") is None
    system = fake_llm.chat_requests[-1].messages[0]["content"]
    assert "current page" not in system and "session was just rotated" in system
    # billed until its idle time was up (5 minutes), not for the 31 it stayed unnoticed
    assert await minutes_left(harness, auth) == 25


async def test_past_the_context_limit_the_model_is_told_to_try_later(
        start_gateway: Start, fake_llm: FakeLLM, website: Website) -> None:
    harness = await start_gateway(browser_max_contexts=1, **ALLOWED)
    auth = await harness.user()
    fake_llm.script += browse({"action": "open", "url": f"{website.base}/table"})
    await chat(harness, auth, "open", thread="t1")
    fake_llm.script += browse({"action": "open", "url": f"{website.base}/table"})
    await chat(harness, auth, "open", thread="t2")
    assert tool_results(fake_llm) == [
        "the browser is busy: 1 conversations have a page open in this gateway; try again in "
        "a few minutes"]
    assert website.hits == ["/table"]


# --- availability ---------------------------------------------------------------------------------
async def test_without_chromium_the_tool_is_not_offered_and_the_hint_says_why(
        start_gateway: Start, fake_llm: FakeLLM) -> None:
    harness = await start_gateway(browser_enabled=True,
                                  browser_executable="/nonexistent/chromium")
    auth = await harness.user()
    await chat(harness, auth, "hello")
    request = fake_llm.chat_requests[-1]
    assert "browser" not in json.dumps(request.body.get("tools", []))
    assert ("No web browser is available here: no Chromium at /nonexistent/chromium"
            in request.messages[0]["content"])
    assert pool_of(harness.gateway.host_for("browser")) is None


async def test_without_playwright_the_tool_is_not_offered_and_the_hint_says_so(
        start_gateway: Start, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    for module in [name for name in sys.modules if name.startswith("playwright")]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, "playwright", None)  # Python's way to make an import fail
    harness = await start_gateway(browser_enabled=True)
    auth = await harness.user()
    await chat(harness, auth, "hello")
    request = fake_llm.chat_requests[-1]
    assert "browser" not in json.dumps(request.body.get("tools", []))
    assert ("No web browser is available here: Playwright is not installed "
            "(pip install 'cloudybot[browser]')" in request.messages[0]["content"])


async def test_the_browser_can_be_turned_off(start_gateway: Start, fake_llm: FakeLLM) -> None:
    harness = await start_gateway(browser_enabled=False)
    auth = await harness.user()
    await chat(harness, auth, "hello")
    request = fake_llm.chat_requests[-1]
    assert "browser" not in json.dumps(request.body.get("tools", []))
    assert "browser" not in request.messages[0]["content"]
