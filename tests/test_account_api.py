"""The caller's account: credits, specialists and saved browser credentials (SPEC §4, §7, §9)."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientResponse
from yarl import URL

from gateway.testing.fake_llm import FakeLLM, Recorded, Scripted, completion
from tests.conftest import Harness
from tests.helpers import assert_json_error

AuthHeaders = dict[str, str]
CREDENTIALS = "/api/user/browser-credentials"
PASSWORD = "Tr0ub4dor-horse-battery-9931"
REDACTED = "[redacted]"


async def credits_of(harness: Harness, auth: AuthHeaders) -> int:
    response = await harness.client.get("/api/user/credits", headers=auth)
    assert response.status == 200
    balance: int = (await response.json())["credits"]
    return balance


async def list_threads(harness: Harness, auth: AuthHeaders) -> list[dict[str, Any]]:
    response = await harness.client.get("/api/threads", headers=auth)
    assert response.status == 200
    threads: list[dict[str, Any]] = (await response.json())["threads"]
    return threads


async def put_specialist(harness: Harness, auth: AuthHeaders, name: str,
                         instructions: str) -> ClientResponse:
    return await harness.client.put(f"/api/specialists/{name}",
                                    json={"instructions": instructions}, headers=auth)


async def save_login(harness: Harness, auth: AuthHeaders, site: str = "mail.example.com",
                     username: str = "alice@example.com",
                     password: str = PASSWORD) -> ClientResponse:
    return await harness.client.put(
        CREDENTIALS, json={"site": site, "username": username, "password": password},
        headers=auth)


# --- credits ------------------------------------------------------------------------------------
async def test_credits_answer_has_user_plan_credits_and_browser_minutes(harness: Harness) -> None:
    auth = await harness.user("alice", plan="pro", credits=500)
    response = await harness.client.get("/api/user/credits", headers=auth)
    assert response.status == 200
    body = await response.json()
    assert body["userId"] == "alice"
    assert body["plan"] == "pro"
    assert body["credits"] == 500
    assert isinstance(body["browserMinutes"], int)
    assert body["browserMinutes"] == harness.gateway.settings.plans["pro"].browser_minutes


async def test_new_user_gets_the_plans_monthly_credits(harness: Harness) -> None:
    auth = await harness.user("alice", plan="free")
    assert await credits_of(harness, auth) == harness.gateway.settings.plans["free"].credits


async def test_chat_turn_lowers_credits_by_the_reported_usage(harness: Harness,
                                                              fake_llm: FakeLLM) -> None:
    auth = await harness.user("alice", credits=500)
    fake_llm.script.append(Scripted(body=completion("a long answer", prompt_tokens=1500,
                                                    completion_tokens=1000)))
    response = await harness.chat(auth, "hello")
    assert response.status == 200
    usage = (await response.json())["usage"]
    assert usage["promptTokens"] == 1500
    assert usage["completionTokens"] == 1000
    assert usage["credits"] > 1
    assert await credits_of(harness, auth) == 500 - usage["credits"]


async def test_credits_are_per_user(harness: Harness) -> None:
    alice = await harness.user("alice", credits=500)
    bob = await harness.user("bob", credits=300)
    response = await harness.chat(alice, "hello")
    spent = (await response.json())["usage"]["credits"]
    assert await credits_of(harness, alice) == 500 - spent
    assert await credits_of(harness, bob) == 300


# --- specialists ----------------------------------------------------------------------------------
async def test_unknown_specialist_is_404(harness: Harness) -> None:
    auth = await harness.user()
    await assert_json_error(await harness.client.get("/api/specialists/nobody", headers=auth),
                            404)


async def test_specialist_put_get_list_delete(harness: Harness) -> None:
    auth = await harness.user()
    put = await put_specialist(harness, auth, "researcher", "Cite your sources.")
    assert put.status == 200
    assert await put.json() == {"name": "researcher", "instructions": "Cite your sources."}

    got = await harness.client.get("/api/specialists/researcher", headers=auth)
    assert got.status == 200
    assert await got.json() == {"name": "researcher", "instructions": "Cite your sources."}

    await put_specialist(harness, auth, "coder", "Write Python.")
    listed = await (await harness.client.get("/api/specialists", headers=auth)).json()
    assert sorted(s["name"] for s in listed["specialists"]) == ["coder", "researcher"]

    deleted = await harness.client.delete("/api/specialists/researcher", headers=auth)
    assert deleted.status == 204
    await assert_json_error(
        await harness.client.get("/api/specialists/researcher", headers=auth), 404)
    await assert_json_error(
        await harness.client.delete("/api/specialists/researcher", headers=auth), 404)
    listed = await (await harness.client.get("/api/specialists", headers=auth)).json()
    assert [s["name"] for s in listed["specialists"]] == ["coder"]


async def test_specialist_put_replaces_instructions(harness: Harness) -> None:
    auth = await harness.user()
    await put_specialist(harness, auth, "researcher", "old")
    await put_specialist(harness, auth, "researcher", "new")
    got = await (await harness.client.get("/api/specialists/researcher", headers=auth)).json()
    assert got["instructions"] == "new"


@pytest.mark.parametrize("name", [
    pytest.param("bad%20name", id="space"),
    pytest.param("a" * 65, id="65-chars"),
    pytest.param("caf%C3%A9", id="non-ascii"),
    pytest.param("a%2Fb", id="slash"),
    pytest.param("a%00b", id="nul"),
    pytest.param("a:b", id="colon"),
])
async def test_bad_specialist_name_is_400_on_every_method(harness: Harness, name: str) -> None:
    auth = await harness.user()
    url = URL(f"/api/specialists/{name}", encoded=True)
    client = harness.client
    await assert_json_error(await client.get(url, headers=auth), 400)
    await assert_json_error(
        await client.put(url, json={"instructions": "x"}, headers=auth), 400)
    await assert_json_error(await client.delete(url, headers=auth), 400)
    listed = await (await client.get("/api/specialists", headers=auth)).json()
    assert listed["specialists"] == []


@pytest.mark.parametrize("body", [
    pytest.param({}, id="missing"), pytest.param({"instructions": 5}, id="int"),
    pytest.param({"instructions": ""}, id="empty"),
    pytest.param({"instructions": ["x"]}, id="list"),
])
async def test_bad_specialist_instructions_are_400(harness: Harness, body: dict[str, Any]) -> None:
    auth = await harness.user()
    response = await harness.client.put("/api/specialists/researcher", json=body, headers=auth)
    await assert_json_error(response, 400)
    await assert_json_error(
        await harness.client.get("/api/specialists/researcher", headers=auth), 404)


async def test_specialists_are_per_user(harness: Harness, fake_llm: FakeLLM) -> None:
    alice = await harness.user("alice")
    bob = await harness.user("bob")
    await put_specialist(harness, alice, "researcher", "alice-only-instructions")
    client = harness.client
    await assert_json_error(await client.get("/api/specialists/researcher", headers=bob), 404)
    assert (await (await client.get("/api/specialists", headers=bob)).json())["specialists"] == []
    await assert_json_error(await client.delete("/api/specialists/researcher", headers=bob), 404)
    await assert_json_error(await harness.chat(bob, "hi", specialist="researcher"), 404)
    assert fake_llm.requests == []
    got = await client.get("/api/specialists/researcher", headers=alice)
    assert (await got.json())["instructions"] == "alice-only-instructions"


async def test_chat_with_a_specialist_puts_its_instructions_in_the_system_prompt(
        harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    await put_specialist(harness, auth, "researcher", "Always cite three sources.")
    response = await harness.chat(auth, "tell me about owls", specialist="researcher")
    assert response.status == 200
    assert "Always cite three sources." in fake_llm.requests[-1].system_text
    await harness.chat(auth, "and now without")
    assert "Always cite three sources." not in fake_llm.requests[-1].system_text


async def test_chat_with_an_unknown_specialist_is_404_and_stores_nothing(
        harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user("alice", credits=100)
    response = await harness.chat(auth, "hello", specialist="nobody")
    await assert_json_error(response, 404)
    assert fake_llm.requests == []
    assert await list_threads(harness, auth) == []
    assert await credits_of(harness, auth) == 100
    await assert_json_error(await harness.client.get("/api/threads/t1", headers=auth), 404)


# --- browser credentials: the API -----------------------------------------------------------------
async def test_saving_a_login_answers_site_and_username_never_the_password(
        harness: Harness) -> None:
    auth = await harness.user()
    response = await save_login(harness, auth)
    assert response.status == 200
    text = await response.text()
    assert PASSWORD not in text
    assert "password" not in text.lower()
    assert json.loads(text) == [{"site": "mail.example.com", "username": "alice@example.com"}]

    second = await save_login(harness, auth, site="bank.example.com", username="al",
                              password="another-Secret-77")
    assert sorted(await second.json(), key=lambda c: c["site"]) == [
        {"site": "bank.example.com", "username": "al"},
        {"site": "mail.example.com", "username": "alice@example.com"}]
    listed = await harness.client.get(CREDENTIALS, headers=auth)
    listed_text = await listed.text()
    assert PASSWORD not in listed_text
    assert "another-Secret-77" not in listed_text


async def test_a_site_is_an_ascii_host_with_a_port_from_1_to_65535(harness: Harness) -> None:
    auth = await harness.user()
    for site, saved in (("Bank.Example.COM", "bank.example.com"), (" a.b:00080 ", "a.b:00080"),
                        ("[::1]:65535", "[::1]:65535")):
        response = await save_login(harness, auth, site=site)
        assert response.status == 200, site
        assert saved in [c["site"] for c in await response.json()]
    # the Kelvin sign lower-cases to an ASCII "k", but is no host name's letter
    for site in ("\u212aelvin.example", "a.b:0", "a.b:65536", "a.b:000080", "a_b.example"):
        response = await save_login(harness, auth, site=site)
        await assert_json_error(response, 400, "invalid_site")


async def test_saved_logins_are_per_user(harness: Harness, fake_llm: FakeLLM) -> None:
    alice = await harness.user("alice")
    bob = await harness.user("bob")
    await save_login(harness, alice)
    listed = await harness.client.get(CREDENTIALS, headers=bob)
    assert await listed.json() == []
    assert (await harness.chat(bob, "log me in")).status == 200
    assert PASSWORD not in json.dumps(fake_llm.requests[-1].body)


@pytest.mark.parametrize("body", [
    pytest.param({"site": "s", "username": "u"}, id="no-password"),
    pytest.param({"site": "s", "password": "p"}, id="no-username"),
    pytest.param({"username": "u", "password": "p"}, id="no-site"),
    pytest.param({"site": 1, "username": "u", "password": "p"}, id="site-int"),
    pytest.param({"site": "s", "username": "u", "password": ["p"]}, id="password-list"),
])
async def test_incomplete_login_is_400_and_nothing_saved(harness: Harness,
                                                         body: dict[str, Any]) -> None:
    auth = await harness.user()
    response = await harness.client.put(CREDENTIALS, json=body, headers=auth)
    await assert_json_error(response, 400)
    assert await (await harness.client.get(CREDENTIALS, headers=auth)).json() == []


# --- browser credentials: where the password may and may not go -----------------------------------
async def test_saved_password_reaches_the_system_prompt(harness: Harness,
                                                        fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    await save_login(harness, auth)
    assert (await harness.chat(auth, "check my mail")).status == 200
    system_text = fake_llm.requests[-1].system_text
    assert PASSWORD in system_text
    assert "mail.example.com" in system_text
    assert "alice@example.com" in system_text
    assert all(PASSWORD not in m["content"] for m in fake_llm.requests[-1].messages[1:])


async def test_deleted_login_leaves_the_prompt(harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    await save_login(harness, auth)
    response = await harness.client.delete(CREDENTIALS, params={"site": "mail.example.com"},
                                           headers=auth)
    assert response.status == 200
    assert await response.json() == []
    assert (await harness.chat(auth, "check my mail")).status == 200
    assert PASSWORD not in fake_llm.requests[-1].system_text


def leaky_responder(request: Recorded) -> Scripted:
    """A model that repeats the password in every chat reply and in every summary."""
    if request.is_summary:
        return Scripted(body=completion(f"The user shared the password {PASSWORD}."))
    return Scripted(body=completion(f"Logging in with {PASSWORD} as you asked."))


async def converse_with_password(harness: Harness, fake_llm: FakeLLM) -> AuthHeaders:
    """Save a login, then five turns in which both sides say the password (summary included)."""
    auth = await harness.user()
    assert (await save_login(harness, auth)).status == 200
    fake_llm.responder = leaky_responder
    for n in range(5):
        response = await harness.chat(auth, f"my password is {PASSWORD}, log in #{n}")
        assert response.status == 200, await response.text()
        assert PASSWORD not in await response.text()
    await harness.gateway.drain()
    assert PASSWORD in fake_llm.chat_requests[-1].system_text
    assert len(fake_llm.summary_requests) == 1
    return auth


async def test_password_is_redacted_from_stored_messages_summary_and_display(
        harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await converse_with_password(harness, fake_llm)
    response = await harness.client.get("/api/threads/t1", headers=auth)
    text = await response.text()
    assert PASSWORD not in text
    thread = json.loads(text)
    display = [m["content"] for m in thread["display_messages"]]
    assert display == [text for n in range(5) for text in (
        f"my password is {REDACTED}, log in #{n}", f"Logging in with {REDACTED} as you asked.")]
    assert thread["summary"] == f"The user shared the password {REDACTED}."
    assert [m["content"] for m in thread["messages"]] == display[-5:]


async def test_password_never_reaches_the_summarizer(harness: Harness,
                                                     fake_llm: FakeLLM) -> None:
    await converse_with_password(harness, fake_llm)
    for request in fake_llm.summary_requests:
        assert PASSWORD not in json.dumps(request.body)


@pytest.mark.sqlite_only
async def test_password_bytes_never_occur_in_any_file_under_the_data_dir(
        harness: Harness, fake_llm: FakeLLM) -> None:
    await converse_with_password(harness, fake_llm)
    data_dir = Path(harness.gateway.settings.data_dir)
    files = [path for path in data_dir.rglob("*") if path.is_file()]
    assert harness.gateway.settings.database_path in files
    stored = b"".join(path.read_bytes() for path in files)
    assert f"{REDACTED}, log in #4".encode() in stored, "the scan does not see stored turns"
    needles = [PASSWORD.encode("utf-8"), PASSWORD.encode("utf-16-le")]
    for path in files:
        content = path.read_bytes()
        for needle in needles:
            assert needle not in content, f"password found in {path}"


async def test_password_never_appears_in_the_logs(harness: Harness, fake_llm: FakeLLM,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    await converse_with_password(harness, fake_llm)
    await harness.client.get("/api/threads/t1")  # a 401 is logged too
    assert caplog.records, "nothing was logged at DEBUG; the check would be vacuous"
    for record in caplog.records:
        assert PASSWORD not in record.getMessage(), record.name
        assert PASSWORD not in (record.exc_text or "")
    assert PASSWORD not in caplog.text


MARKUP_PASSWORD = "p&ss<w>rd\"'9"


async def test_password_with_markup_characters_reaches_the_prompt_verbatim(
        harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    await save_login(harness, auth, password=MARKUP_PASSWORD)
    assert (await harness.chat(auth, "check my mail")).status == 200
    assert MARKUP_PASSWORD in fake_llm.requests[-1].system_text


async def test_model_repeating_the_password_it_was_shown_is_redacted(
        harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    await save_login(harness, auth, password=MARKUP_PASSWORD)

    def repeat_shown_password(request: Recorded) -> Scripted:
        shown = re.search(r", password (.+)$", request.system_text, re.MULTILINE)
        assert shown is not None
        return Scripted(body=completion(f"I will type {shown.group(1)} for you."))

    fake_llm.responder = repeat_shown_password
    assert (await harness.chat(auth, "log me in")).status == 200
    thread = await (await harness.client.get("/api/threads/t1", headers=auth)).json()
    reply = thread["display_messages"][-1]["content"]
    assert reply == f"I will type {REDACTED} for you."
